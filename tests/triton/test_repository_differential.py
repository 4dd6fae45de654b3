"""One Triton model repository served by Triton and by servinglib-server: the repository index,
the config answers and the model control modes' refusals compared, through tritonclient."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from tritonclient.utils import InferenceServerException

from servinglib.testing import wait_until
from tests.server.cli.test_model_server import Server
from tests.server.triton_models import (
    ADD_SUB,
    ALL_VERSIONS,
    BAD,
    BATCHED,
    GPU,
    MODEL_PY,
    write_model,
)
from tests.triton.oracle import running_triton, skip_without_triton

# Triton's flags for a repository with models it cannot load: serve the others, and be ready.
TRITON_DEGRADED = ("--exit-on-error=false", "--strict-readiness=false")
SERVED = ("add_sub", "batched", "every", "nocfg")


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """Models both serve (one without config.pbtxt); a GPU model and a bad config, neither."""
    repo = tmp_path / "repo"
    write_model(repo, "add_sub", ADD_SUB)
    write_model(repo, "batched", BATCHED)
    write_model(repo, "every", ALL_VERSIONS, versions=(1, 2))
    write_model(repo, "gpu", GPU)
    write_model(repo, "bad", BAD)
    (repo / "nocfg" / "1").mkdir(parents=True)
    (repo / "nocfg" / "1" / "model.py").write_text(MODEL_PY.format(factor=1, shape=[4]))
    return repo


@contextmanager
def both(
    repository: Path, workdir: Path, triton_flags: tuple[str, ...], ours: tuple[str, ...]
) -> Iterator[dict[str, tuple[Any, Any]]]:
    """Triton and servinglib-server on ``repository``: each one's HTTP and gRPC clients."""
    skip_without_triton()
    workdir.mkdir()
    server = Server(f"--model_repository={repository}", "--allow_python_code_execution", *ours)
    try:
        with running_triton(repository, workdir, triton_flags) as triton:
            server.wait_ready()
            clients = {
                "triton": (
                    triton_http.InferenceServerClient(triton.http_url),
                    triton_grpc.InferenceServerClient(triton.grpc_url),
                ),
                "ours": (
                    triton_http.InferenceServerClient(f"127.0.0.1:{server.rest_port}"),
                    triton_grpc.InferenceServerClient(f"127.0.0.1:{server.grpc_port}"),
                ),
            }
            try:
                yield clients
            finally:
                for http, grpc in clients.values():
                    http.close()
                    grpc.close()
    finally:
        server.close()


def _refusal(call: Any, name: str) -> tuple[str, str]:
    with pytest.raises(InferenceServerException) as caught:
        call(name)
    return str(caught.value.status()), caught.value.message() or ""


def test_none_mode_index_configs_and_refusals_are_triton_s(
    repository: Path, tmp_path: Path
) -> None:
    """In none mode: the same models READY in the index, the same completed configs over both
    protocols (but Triton's optimization defaults), and load/unload refused with Triton's code
    and message."""
    with both(repository, tmp_path / "work", (*TRITON_DEGRADED,), ("--start_degraded",)) as c:
        indexes = {
            side: sorted(
                (e["name"], e.get("version", ""), e.get("state", ""))
                for e in grpc.get_model_repository_index(as_json=True)["models"]
            )
            for side, (_, grpc) in c.items()
        }
        configs = {
            side: {
                name: (http.get_model_config(name), grpc.get_model_config(name, as_json=True))
                for name in SERVED
            }
            for side, (http, grpc) in c.items()
        }
        refusals = {
            side: [_refusal(client.load_model, "add_sub") for client in (http, grpc)]
            + [_refusal(client.unload_model, "every") for client in (http, grpc)]
            for side, (http, grpc) in c.items()
        }

    ready = {side: [e for e in index if e[2] == "READY"] for side, index in indexes.items()}
    assert ready["ours"] == ready["triton"]
    assert {e[0] for e in indexes["ours"]} == {e[0] for e in indexes["triton"]}
    for name in SERVED:
        (triton_http_config, triton_grpc_config) = configs["triton"][name]
        (our_http_config, our_grpc_config) = configs["ours"][name]
        del triton_http_config["optimization"]
        del triton_grpc_config["config"]["optimization"]
        assert our_http_config == triton_http_config, name
        assert our_grpc_config == triton_grpc_config, name
    for (our_code, our_message), (code, message) in zip(
        refusals["ours"], refusals["triton"], strict=True
    ):
        assert our_code == code
        assert our_message.startswith(message)


def test_explicit_mode_index_is_triton_s(repository: Path, tmp_path: Path) -> None:
    """In explicit mode with add_sub loaded at start, and after batched is loaded and add_sub
    unloaded, both list the same index: unserved models by name alone."""
    with both(
        repository,
        tmp_path / "work",
        ("--model-control-mode=explicit", "--load-model=add_sub"),
        ("--model_control_mode=explicit", "--load_model=add_sub"),
    ) as c:

        def indexes() -> dict[str, list[dict[str, str]]]:
            return {
                side: grpc.get_model_repository_index(as_json=True)["models"]
                for side, (_, grpc) in c.items()
            }

        at_start = indexes()
        for _, grpc in c.values():
            grpc.load_model("batched")
            grpc.unload_model("add_sub")
            grpc.unload_model("absent")  # not served: nothing to do, on both

        def unloaded() -> bool:  # an unload returns before its model is gone, on both
            return all(e.get("state") != "UNLOADING" for index in indexes().values() for e in index)

        wait_until(unloaded)
        after = indexes()
        gpu = {side: _refusal(grpc.load_model, "gpu")[0] for side, (_, grpc) in c.items()}

    assert at_start["ours"] == at_start["triton"]
    assert [e["name"] for e in after["ours"]] == [e["name"] for e in after["triton"]]
    states = {side: {e["name"]: e.get("state") for e in index} for side, index in after.items()}
    assert states["ours"]["batched"] == states["triton"]["batched"] == "READY"
    assert states["ours"]["add_sub"] == states["triton"]["add_sub"] == "UNAVAILABLE"
    assert gpu["ours"] == gpu["triton"] == "StatusCode.INVALID_ARGUMENT"
