"""grpc.health.v1 through grpcio-health-checking's own stub: Check and Watch follow readiness."""

from __future__ import annotations

import threading
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_servers import serving, write_python_model

from servinglib.server.config import ModelServerConfig
from servinglib.server.server_core import ServerCore
from servinglib.testing.plugin import TEST_SERVER_CORE_OPTIONS

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE_UNKNOWN = health_pb2.HealthCheckResponse.SERVICE_UNKNOWN


def test_check_whole_server_and_services(channel: grpc.Channel) -> None:
    """Check says SERVING for the server and its services, NOT_FOUND for unknown ones."""
    stub = health_pb2_grpc.HealthStub(channel)
    for service in ("", "tensorflow.serving.PredictionService", "inference.GRPCInferenceService"):
        response = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=30)
        assert response.status == SERVING
    with pytest.raises(grpc.RpcError) as caught:
        stub.Check(health_pb2.HealthCheckRequest(service="nope"), timeout=30)
    assert caught.value.code() == grpc.StatusCode.NOT_FOUND


def test_watch_follows_drain_and_stop(tmp_path: Path, server_kind: str) -> None:
    """Watch sends SERVING, then NOT_SERVING once the server drains, and ends when it stops."""
    config = ModelServerConfig([write_python_model(tmp_path, "a")])
    with (
        ServerCore(config, TEST_SERVER_CORE_OPTIONS) as core,
        serving(core, server=server_kind) as served,
    ):
        channel = served.channel()
        stream = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(), timeout=60
        )
        assert next(stream).status == SERVING
        served.server.set_not_serving()
        assert next(stream).status == NOT_SERVING
        unknown = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(service="nope"), timeout=60
        )
        assert next(unknown).status == SERVICE_UNKNOWN
        unknown.cancel()
        ended = threading.Event()

        def drain() -> None:
            for _ in stream:
                pass
            ended.set()

        reader = threading.Thread(target=drain)
        reader.start()
        served.loop.run(served.server.stop(5))
        reader.join(timeout=30)
        assert ended.is_set()
        channel.close()


def test_watch_follows_model_unload(tmp_path: Path, server_kind: str) -> None:
    """Watch turns NOT_SERVING when a configured model has no available version any more."""
    config = ModelServerConfig([write_python_model(tmp_path, "a")])
    with (
        ServerCore(config, TEST_SERVER_CORE_OPTIONS) as core,
        serving(core, server=server_kind) as served,
        served.channel() as channel,
    ):
        stream = health_pb2_grpc.HealthStub(channel).Watch(
            health_pb2.HealthCheckRequest(), timeout=60
        )
        assert next(stream).status == SERVING
        core.close()
        assert next(stream).status == NOT_SERVING
        stream.cancel()
