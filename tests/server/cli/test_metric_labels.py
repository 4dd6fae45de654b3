"""Model names, versions, signatures and labels a client makes up add no series to a scrape."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from servinglib.server.observe.metrics import DEFAULT_METRICS_PATH, UNKNOWN_MODEL
from tests.server.cli.test_model_server import Server
from tests.server.cli.test_request_bombs import triple_server

NAMES = 10_000  # distinct model names per front end
OTHERS = 1_000  # distinct versions, signatures and labels per front end


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with triple_server(tmp_path, "--enable_metrics") as running:
        yield running


def series(server: Server) -> list[str]:
    """The sample lines of a scrape: one per series."""
    text = server.http.get(DEFAULT_METRICS_PATH).text
    return sorted(line.rsplit(" ", 1)[0] for line in text.splitlines() if line[:1] != "#")


def made_up(server: Server, first: int, count: int) -> None:
    """Requests naming ``count`` made-up models, and as many made-up versions, signatures and
    labels of "triple", over REST (one keep-alive client) and gRPC (one shared channel)."""
    stub = prediction_service_pb2_grpc.PredictionServiceStub(server.channel)
    x = {"instances": [1.0]}

    def grpc_predict(name: str, version: int = 0, label: str = "", signature: str = "") -> None:
        request = predict_pb2.PredictRequest()
        request.model_spec.name = name
        if version:
            request.model_spec.version.value = version
        if label:
            request.model_spec.version_label = label
        request.model_spec.signature_name = signature
        request.inputs["x"].dtype = 1  # DT_FLOAT
        request.inputs["x"].tensor_shape.dim.add().size = 1
        request.inputs["x"].float_val.append(1.0)
        with pytest.raises(grpc.RpcError):
            stub.Predict(request, timeout=30)

    def one(i: int) -> None:
        names_only = i >= first + min(count, OTHERS)
        assert server.http.post(f"/v1/models/nope-{i}:predict", json=x).status_code == 404
        grpc_predict(f"nope-{i}")
        if names_only:
            return
        for path, body in (
            (f"/v1/models/triple/versions/{i + 2}:predict", x),
            (f"/v1/models/triple/labels/l{i}:predict", x),
            ("/v1/models/triple:predict", {**x, "signature_name": f"s{i}"}),
        ):
            assert server.http.post(path, json=body).status_code in (400, 404)
        grpc_predict("triple", version=i + 2)
        grpc_predict("triple", label=f"l{i}")
        grpc_predict("triple", signature=f"s{i}")

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(one, range(first, first + count)))


def test_made_up_names_versions_signatures_and_labels_add_no_series(server: Server) -> None:
    """10,000 unknown names per front end (and 1,000 of each other kind): the series of one."""
    assert server.predict("triple", [1.0]).status_code == 200
    made_up(server, 0, 1)
    after_one = series(server)
    assert any(f'model_name="{UNKNOWN_MODEL}"' in line for line in after_one)
    made_up(server, 1, NAMES - 1)
    after_all = series(server)
    assert after_all == after_one
    assert not any("nope-" in line for line in after_all)
