"""A real servinglib-server gives the memory of a burst of large gRPC requests back to the OS."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest

from servinglib.protos import predict_pb2
from servinglib.testing import wait_until
from tests.server.cli.test_model_server import CONFIG, Server
from tests.server.cli.test_request_bombs import status_bytes, triple_server

MIB = 1 << 20
PREDICT = "/tensorflow.serving.PredictionService/Predict"


def predict_request(elements: int, model: str = "triple") -> bytes:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    tensor = request.inputs["x"]
    tensor.dtype = 1  # DT_FLOAT
    tensor.tensor_shape.dim.add(size=elements)
    tensor.tensor_content = bytes(4 * elements)
    return request.SerializeToString()


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with triple_server(tmp_path) as running:
        yield running


def test_rss_returns_near_idle_after_a_burst_of_large_requests(server: Server) -> None:
    """After 12 Predicts of 48 MiB (4 at a time), the RSS comes back within 128 MiB of idle."""
    options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}", options=options) as channel:
        predict = channel.unary_unary(PREDICT)
        for _ in range(3):
            predict(predict_request(16), timeout=30)
        idle = status_bytes(server.process.pid, "VmRSS")
        large = predict_request(48 * MIB // 4)
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            list(pool.map(lambda _i: predict(large, timeout=120), range(12)))
    wait_until(lambda: status_bytes(server.process.pid, "VmRSS") < idle + 128 * MIB, timeout_s=30)


def summing_saved_model(root: Path) -> Path:
    """A SavedModel "summer" (version 1) answering float32 x [n] with its sum, y [1]."""
    import tensorflow as tf

    class Summer(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")], autograph=False)
        def predict(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"y": tf.reshape(tf.reduce_sum(x), [1])}

    module = Summer()
    tf.saved_model.save(
        module, str(root / "summer" / "1"), signatures={"serving_default": module.predict}
    )
    config = root / "models.config"
    config.write_text(CONFIG.replace("python", "tensorflow") % ("summer", root / "summer"))
    return config


def test_a_savedmodel_servers_rss_returns_after_large_requests(tmp_path: Path) -> None:
    """After 2 Predicts of 128 MiB, a SavedModel's server is back within 64 MiB of idle RSS."""
    server = Server(f"--model_config_file={summing_saved_model(tmp_path)}")
    options = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]
    try:
        server.wait_ready()
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}", options=options) as channel:
            predict = channel.unary_unary(PREDICT)
            for _ in range(3):
                predict(predict_request(16, "summer"), timeout=30)
            idle = status_bytes(server.process.pid, "VmRSS")
            large = predict_request(128 * MIB // 4, "summer")
            for _ in range(2):
                predict(large, timeout=120)
        # TensorFlow's own pool (oneDNN's BFC allocator) would keep the 128 MiB of the copy it
        # makes of each request's tensor for good: no trim reaches it.
        wait_until(
            lambda: status_bytes(server.process.pid, "VmRSS") < idle + 64 * MIB, timeout_s=30
        )
    finally:
        server.close()
