"""Router: routes of matched paths are remembered, errors are not, and the cache stays bounded."""

from __future__ import annotations

import pytest

from servinglib.errors import InvalidArgumentError, NotFoundError
from servinglib.server.model_spec import ModelSpec
from servinglib.server.rest import router as router_module
from servinglib.server.rest.router import Route, Router


class _Api:
    """Stands in for both protocol APIs: every handler is the same coroutine."""

    def __getattr__(self, _name: str) -> object:
        async def handler(_request: object) -> object:
            raise AssertionError("not called")

        return handler


@pytest.fixture
def router() -> Router:
    """A Router over stand-in handlers (matching never calls them)."""
    api: object = _Api()
    return Router(api, api, api)  # type: ignore[arg-type]


def test_a_path_seen_before_gives_the_same_route(router: Router) -> None:
    """The second match of a path returns the route the first one made."""
    first = router.match("POST", "/v1/models/m%2Fx/versions/3:predict")
    assert router.match("POST", "/v1/models/m%2Fx/versions/3:predict") is first
    assert (first.api, first.model_name, first.version, first.label) == ("predict", "m/x", 3, None)


def test_routes_carry_their_model_spec(router: Router) -> None:
    """A model route holds the ModelSpec of its selectors; server-level routes hold none."""
    assert router.match("GET", "/v1/models/m/labels/stable").model_spec == ModelSpec.labeled(
        "m", "stable"
    )
    assert router.match("POST", "/v2/models/m/infer").model_spec == ModelSpec.latest("m")
    assert router.match("GET", "/v2/health/ready").model_spec is None
    assert Route("x", router.match("GET", "/v2").handler).model_spec is None


def test_paths_that_fail_to_match_fail_every_time(router: Router) -> None:
    """Errors are not remembered: the same bad path raises again."""
    for _ in range(2):
        with pytest.raises(NotFoundError):
            router.match("GET", "/nowhere")
        with pytest.raises(InvalidArgumentError):
            router.match("DELETE", "/v1/models/m")


def test_the_cache_is_bounded(router: Router, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past its size the cache starts over, and matching still answers correctly."""
    monkeypatch.setattr(router_module, "_CACHE_SIZE", 4)
    for index in range(10):
        route = router.match("POST", f"/v2/models/m{index}/infer")
        assert route.model_name == f"m{index}"
    assert len(router._matched) <= 4
