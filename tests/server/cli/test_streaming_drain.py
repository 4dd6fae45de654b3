"""servinglib-server with streams open at SIGTERM: they finish within the grace, or are cut off."""

from __future__ import annotations

import json
import queue
import signal
import threading
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import tritonclient.grpc as triton
from test_model_server import Server

from tests.server.stream_model import ENDLESS, closed_tags, write_stream_model

CONFIG = 'model_config_list { config { name: "stream" base_path: "%s" model_platform: "python" } }'


def serve(root: Path, grace_s: float) -> Server:
    write_stream_model(root)
    config = root / "models.config"
    config.write_text(CONFIG % (root / "stream"))
    server = Server(
        f"--model_config_file={config}",
        "--allow_python_code_execution",
        "--enable_metrics",
        "--drain_delay_seconds=0",
        f"--shutdown_grace_seconds={grace_s}",
    )
    server.wait_ready()
    return server


def data_lines(response: httpx.Response) -> Any:
    for line in response.iter_lines():
        if line.startswith("data: "):
            yield json.loads(line[6:])


def test_a_stream_open_at_sigterm_finishes_within_the_grace(tmp_path: Path) -> None:
    """A stream read after SIGTERM gets every part; the process then exits 0."""
    server = serve(tmp_path, grace_s=30)
    try:
        url = "/v2/models/stream/generate_stream"
        with server.http.stream("POST", url, json={"n": 50, "tag": "finish"}) as response:
            events = data_lines(response)
            first = next(events)
            server.process.send_signal(signal.SIGTERM)
            rest = list(events)
        assert [e["i"] for e in [first, *rest]] == list(range(50))
        assert server.process.wait(timeout=30) == 0
        assert closed_tags(tmp_path) == ["finish"]
    finally:
        server.close()


def test_streams_still_open_after_the_grace_are_cut_off(tmp_path: Path) -> None:
    """Endless streams on REST and gRPC: past the grace each gets an error, the generators close."""
    server = serve(tmp_path, grace_s=1)
    results: queue.Queue[tuple[Any, Any]] = queue.Queue()
    client = triton.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    try:
        client.start_stream(callback=lambda result, error: results.put((result, error)))
        n = triton.InferInput("n", [1], "INT32")
        n.set_data_from_numpy(np.array([ENDLESS], np.int32))
        tag = triton.InferInput("tag", [1], "BYTES")
        tag.set_data_from_numpy(np.array([b"grpc"], dtype=object))
        client.async_stream_infer("stream", [n, tag], request_id="g")
        assert results.get(timeout=30)[1] is None
        errors: list[str] = []

        def read_grpc() -> None:
            while True:
                _result, error = results.get(timeout=60)
                if error is not None:
                    errors.append(error.message())
                    return

        reader = threading.Thread(target=read_grpc)
        reader.start()
        url = "/v2/models/stream/generate_stream"
        with server.http.stream("POST", url, json={"n": ENDLESS, "tag": "rest"}) as response:
            events = data_lines(response)
            next(events)
            server.process.send_signal(signal.SIGTERM)
            last = [event for event in events if "error" in event]
        reader.join(timeout=60)
        assert "shutting down" in last[0]["error"]
        assert errors
        assert "shutting down" in errors[0] or "CANCELLED" in errors[0].upper()
        server.process.wait(timeout=30)
        assert sorted(closed_tags(tmp_path)) == ["grpc", "rest"]
    finally:
        client.stop_stream(cancel_requests=True)
        client.close()
        server.close()
