"""Which endpoint a method and path go to, and the model selectors the path carries."""

from __future__ import annotations

import functools
import re
from typing import final
from urllib.parse import unquote_to_bytes

import attrs

from servinglib.errors import InvalidArgumentError, NotFoundError
from servinglib.server.model_spec import ModelSpec
from servinglib.server.rest.custom_http import CustomHttpApi
from servinglib.server.rest.exchange import Handler
from servinglib.server.rest.generate import GenerateApi
from servinglib.server.rest.kserve_v2 import KServeV2Api
from servinglib.server.rest.tf_serving import TfServingApi

_TFS_POST = re.compile(
    r"/v1/models/([^/:]+)(?:/versions/([0-9]+)|/labels/([^/:]+))?:(classify|regress|predict|explain)",
    re.IGNORECASE,
)
_TFS_GET = re.compile(
    r"/v1/models/([^/:]+)(?:/versions/([0-9]+)|/labels/([^/:]+))?(/metadata)?", re.IGNORECASE
)
_CUSTOM = re.compile(
    r"/v1/models/([^/:]+)(?:/versions/([0-9]+)|/labels/([^/:]+))?/custom(/.*)?",
    re.IGNORECASE | re.DOTALL,
)
_V2_MODEL = re.compile(
    r"/v2/models/([^/]+)(?:/versions/([^/]+))?"
    r"(?:/(ready|config|infer|generate|generate_stream|stats))?",
    re.IGNORECASE,
)
_V2_REPOSITORY_MODEL = re.compile(r"/v2/repository/models/([^/]+)/(load|unload)", re.IGNORECASE)
_CACHE_SIZE = 4096  # distinct (method, path) pairs remembered; past it the cache starts over


@final
@attrs.frozen
class Route:
    """A matched endpoint: its API name (for logs and metrics), handler and model selectors.

    ``model_name`` is empty for server-level endpoints.  ``model_spec`` is
    the ModelSpec the selectors make, built once with the route (None for
    server-level endpoints).  Immutable.
    """

    api: str
    handler: Handler
    model_name: str = ""
    version: int | None = None
    label: str | None = None
    model_spec: ModelSpec | None = attrs.field(init=False, eq=False, repr=False)

    @model_spec.default
    def _model_spec(self) -> ModelSpec | None:
        if not self.model_name:
            return None
        return ModelSpec(self.model_name, self.version, self.label)


@final
class Router:
    """Maps (method, raw path) to a Route.

    Thread-safe: the routes are immutable; the cache of matched paths is a
    dict whose single operations the GIL makes atomic, and a route is the
    same whichever thread matched it first.
    """

    def __init__(
        self,
        tfs: TfServingApi,
        v2: KServeV2Api,
        generate: GenerateApi,
        custom: CustomHttpApi | None = None,
    ) -> None:
        self._tfs = tfs
        self._custom = custom
        self._v2 = v2
        self._v2_post = {
            "infer": v2.infer,
            "generate": generate.generate,
            "generate_stream": generate.generate_stream,
        }
        self._matched: dict[tuple[str, str], Route] = {}
        self._static: dict[tuple[str, str], Route] = {
            ("GET", "/v1/models"): Route("list_models", tfs.list_models),
            ("GET", "/v2"): Route("server_metadata", v2.server_metadata),
            ("GET", "/v2/health/live"): Route("health_live", v2.live),
            ("GET", "/v2/health/ready"): Route("health_ready", v2.ready),
            ("GET", "/v2/models"): Route("list_models", v2.list_models),
            ("GET", "/v2/models/stats"): Route("model_statistics", v2.model_statistics),
            ("POST", "/v2/repository/index"): Route("repository_index", v2.repository_index),
        }
        self._tfs_post = {
            "predict": tfs.predict,
            "classify": tfs.classify,
            "regress": tfs.regress,
            "explain": tfs.explain,
        }
        self._v2_get = {
            None: ("model_metadata", v2.model_metadata),
            "ready": ("model_ready", v2.model_ready),
            "config": ("model_config", v2.model_config),
            "stats": ("model_statistics", v2.model_statistics),
        }

    def match(self, method: str, path: str) -> Route:
        """The route of ``method`` and ``path`` (raw, percent-encoded; query excluded).

        A HEAD goes where its GET goes (RFC 9110: the connection then sends the GET's head
        alone).  Raises NotFoundError for paths no endpoint serves, InvalidArgumentError
        for a malformed ``/v1/`` request (TF Serving's answer) or a version
        that is not a number.
        """
        if method == "HEAD":
            method = "GET"
        key = (method, path)
        route = self._matched.get(key)
        if route is None:
            route = self._match(method, path)
            if len(self._matched) >= _CACHE_SIZE:
                self._matched.clear()
            self._matched[key] = route
        return route

    def _match(self, method: str, path: str) -> Route:
        static = self._static.get((method, path.rstrip("/").lower() or "/"))
        if static is not None:
            return static
        lowered = path[:4].lower()
        if lowered == "/v1/":
            return self._match_tfs(method, path)
        if lowered == "/v2/":
            return self._match_v2(method, path)
        raise NotFoundError(f"Not found: {method} {_shown(path)}")

    def _match_tfs(self, method: str, path: str) -> Route:
        custom = _CUSTOM.fullmatch(path) if self._custom is not None else None
        if custom is not None:
            assert self._custom is not None
            name, version, label, below = custom.groups()
            handler = functools.partial(self._custom.handle, method, _decoded(below or "/"))
            return Route("custom", handler, *_selectors(name, version, label))
        if method == "POST":
            found = _TFS_POST.fullmatch(path)
            if found is not None:
                name, version, label, verb = found.groups()
                verb = verb.lower()
                return Route(verb, self._tfs_post[verb], *_selectors(name, version, label))
        elif method == "GET":
            found = _TFS_GET.fullmatch(path)
            if found is not None:
                name, version, label, metadata = found.groups()
                if metadata:
                    return Route("metadata", self._tfs.metadata, *_selectors(name, version, label))
                return Route("status", self._tfs.status, *_selectors(name, version, label))
        raise InvalidArgumentError(f"Malformed request: {method} {_shown(path)}")

    def _match_v2(self, method: str, path: str) -> Route:
        if method == "POST":
            repository = _V2_REPOSITORY_MODEL.fullmatch(path)
            if repository is not None:
                name, verb = repository.groups()
                if verb.lower() == "load":
                    return Route("repository_load", self._v2.repository_load, _decoded(name))
                return Route("repository_unload", self._v2.repository_unload, _decoded(name))
        found = _V2_MODEL.fullmatch(path)
        if found is not None:
            name, raw_version, verb = found.groups()
            verb = verb.lower() if verb else None
            version = None
            if raw_version is not None:
                if not raw_version.isascii() or not raw_version.isdigit():
                    raise InvalidArgumentError(
                        f"Model version must be a non-negative integer, got {_shown(raw_version)}"
                    )
                version = int(raw_version)
            if method == "POST" and verb in self._v2_post:
                return Route(verb, self._v2_post[verb], _decoded(name), version)
            if method == "GET" and verb not in self._v2_post:
                api, handler = self._v2_get[verb]
                return Route(api, handler, _decoded(name), version)
        raise NotFoundError(f"Not found: {method} {_shown(path)}")


def below_root(path: str, root_path: str) -> str:
    """``path`` seen from inside the app mounted at ``root_path`` (the ASGI scope's two fields).

    ASGI servers pass the whole path, mount point included, so it is taken
    off the front (a prefix spelled percent-encoded in ``path`` is found by
    decoding).  A path that does not start with ``root_path`` is returned
    unchanged.
    """
    root = root_path.rstrip("/")
    if not root:
        return path
    if path.startswith(root):
        rest = path[len(root) :]
        if not rest or rest[0] == "/":
            return rest or "/"
    end = path.find("/", 1)
    while end != -1:
        if _decoded(path[:end]) == root:
            return path[end:]
        end = path.find("/", end + 1)
    return path


def _selectors(
    name: str, version: str | None, label: str | None
) -> tuple[str, int | None, str | None]:
    return (
        _decoded(name),
        int(version) if version is not None else None,
        _decoded(label) if label is not None else None,
    )


def _decoded(text: str) -> str:
    """A path segment percent-decoded, read as UTF-8 (the path arrives as latin-1 text)."""
    return unquote_to_bytes(text.encode("latin-1")).decode("utf-8", "replace")


def _shown(path: str) -> str:
    """``path`` cut short for messages (it comes from the client)."""
    return path if len(path) <= 200 else path[:200] + "..."
