"""Triton 2.51 with ``--cache-config local,size=...`` and servinglib with ``--cache_config``
serve one repository alike: the same outputs and the same statistics counts."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import tritonclient.http as triton_http

from servinglib.loaders import PythonPlatformConfig
from servinglib.server import ServerCore, ServerCoreOptions
from servinglib.server.config import ModelServerConfig
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.plane.response_cache_config import ResponseCacheConfig
from servinglib.server.rest import RestOptions, create_app, create_server
from servinglib.server.triton_repository import TritonRepository
from tests.triton.oracle import find_triton, running_triton, skip_without_triton, write_add_sub

CACHE_BYTES = 1 << 20


def write_cached_repository(root: Path) -> Path:
    """``add_sub`` with ``response_cache { enable: true }`` in its config.pbtxt."""
    model = write_add_sub(root)
    config = model / "config.pbtxt"
    config.write_text(config.read_text() + "\nresponse_cache { enable: true }\n")
    return root


@contextmanager
def servinglib_serving(repository: Path) -> Iterator[str]:
    """servinglib serving ``repository`` with a response cache over REST: its ``host:port``."""
    models = TritonRepository(repository).scan().models
    options = ServerCoreOptions(
        platform_configs={"python": PythonPlatformConfig(allow_code_execution=True)}
    )
    with ServerCore(ModelServerConfig(models), options) as core:
        plane = DataPlane(core, response_cache=ResponseCacheConfig(CACHE_BYTES))
        app = create_app(plane, RestOptions())
        server, port = create_server(app)
        try:
            with server:
                yield f"127.0.0.1:{port}"
        finally:
            app.close()
            plane.close()


def exchange(url: str) -> tuple[list[list[float]], dict[str, Any]]:
    """Requests A, A, B, A (miss, hit, miss, hit): their OUTPUT0s and the statistics."""
    a = np.ones((1, 4), np.float32)
    b = np.full((1, 4), 2.0, np.float32)
    client = triton_http.InferenceServerClient(url)
    try:
        outputs = []
        for x in (a, a, b, a):
            inputs = [triton_http.InferInput(n, [1, 4], "FP32") for n in ("INPUT0", "INPUT1")]
            for tensor in inputs:
                tensor.set_data_from_numpy(x)
            result = client.infer("add_sub", inputs)
            outputs.append(result.as_numpy("OUTPUT0").tolist())
        statistics = _all_counted(client, len(outputs))
    finally:
        client.close()
    return outputs, statistics


def _all_counted(client: triton_http.InferenceServerClient, requests: int) -> dict[str, Any]:
    """add_sub's statistics once its ``requests`` are counted: Triton counts a request after
    its response is sent, so a read right after the answer may miss it (seen under load)."""
    deadline = time.monotonic() + 10
    while True:
        statistics: dict[str, Any] = client.get_inference_statistics("add_sub", "1")["model_stats"][
            0
        ]
        if int(statistics["inference_stats"]["success"]["count"]) >= requests:
            return statistics
        assert time.monotonic() < deadline, statistics
        time.sleep(0.05)  # another server's counters: no event to wait on


def counts(statistics: dict[str, Any]) -> dict[str, int]:
    """The counts of a model's statistics (durations differ between servers)."""
    inference = statistics["inference_stats"]
    return {
        "inference_count": statistics["inference_count"],
        "execution_count": statistics["execution_count"],
        **{f"{name}.count": int(inference[name]["count"]) for name in sorted(inference)},
    }


def test_a_cached_model_answers_and_counts_as_triton(tmp_path: Path) -> None:
    """Same outputs; success 4, cache_hit 2, cache_miss 2, inference and execution 2 on both."""
    skip_without_triton()
    repository = write_cached_repository(tmp_path / "repository")
    workdir = tmp_path / "work"
    workdir.mkdir()
    caches = find_triton().server.parent.parent / "caches"
    options = [f"--cache-directory={caches}", f"--cache-config=local,size={CACHE_BYTES}"]
    with running_triton(repository, workdir, options) as triton:
        theirs, their_statistics = exchange(triton.http_url)
    with servinglib_serving(repository) as url:
        ours, our_statistics = exchange(url)
    assert ours == theirs
    assert counts(our_statistics) == counts(their_statistics)
    assert counts(our_statistics)["cache_hit.count"] == 2
    assert counts(our_statistics)["compute_infer.count"] == 2
    assert int(our_statistics["inference_stats"]["cache_hit"]["ns"]) > 0
