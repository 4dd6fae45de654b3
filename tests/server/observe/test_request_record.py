"""One RequestRecord for both front ends, given to observers passed as keywords alike."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc

from servinglib.errors import StatusCode
from servinglib.server import DataPlane, RequestRecord, ServerCore
from servinglib.server.config import ModelServerConfig
from servinglib.server.grpc import GrpcServer, GrpcServerOptions, create_server
from servinglib.server.rest import create_app
from servinglib.server.rest import create_server as create_rest_server
from servinglib.testing.plugin import TEST_SERVER_CORE_OPTIONS
from tests.server.grpc.grpc_servers import LoopThread, write_python_model


@pytest.fixture
def core(tmp_path: Path) -> Iterator[ServerCore]:
    with ServerCore(
        ModelServerConfig([write_python_model(tmp_path)]), TEST_SERVER_CORE_OPTIONS
    ) as served:
        yield served


def test_rest_and_grpc_report_the_same_record_to_on_request(core: ServerCore) -> None:
    """create_app and create_server take one plane and on_request; both report a RequestRecord."""
    plane = DataPlane(core)
    records: list[RequestRecord] = []
    loop = LoopThread()

    async def start() -> GrpcServer:
        server, _ = create_server(
            plane, GrpcServerOptions(host="127.0.0.1", port=0), on_request=records.append
        )
        await server.start()
        return server

    rest, rest_port = create_rest_server(create_app(plane, on_request=records.append))
    rest.start()
    try:
        server = loop.run(start())
        response = httpx.get(f"http://127.0.0.1:{rest_port}/v1/models/py", timeout=30)
        assert response.status_code == 200
        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as channel:
            request = get_model_status_pb2.GetModelStatusRequest()
            request.model_spec.name = "py"
            model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(request, timeout=30)
        loop.run(server.stop(0))
    finally:
        rest.stop()
        loop.close()
        plane.close()
    by_entrypoint = {record.entrypoint: record for record in records if record.model_name}
    over_rest, over_grpc = by_entrypoint["REST"], by_entrypoint["GRPC"]
    assert (over_rest.model_name, over_rest.api, over_rest.code) == ("py", "status", StatusCode.OK)
    assert over_rest.status == 200
    assert not over_rest.service
    assert (over_grpc.model_name, over_grpc.code) == ("py", StatusCode.OK)
    assert over_grpc.service == "tensorflow.serving.ModelService"
    assert over_grpc.method == "GetModelStatus"
    assert over_grpc.status == 0


def test_the_old_spellings_warn_and_still_work(core: ServerCore) -> None:
    """create_app(core, plane=...) and GrpcServerOptions.rpc_observer warn, and keep working."""
    plane = DataPlane(core)
    try:
        with pytest.warns(DeprecationWarning, match=r"create_app\(plane\)"):
            app = create_app(core, plane=plane)
        assert app.plane is plane
        records: list[RequestRecord] = []

        async def make() -> None:
            with pytest.warns(DeprecationWarning, match="on_request"):
                server, _ = create_server(
                    plane, GrpcServerOptions(host="127.0.0.1", port=0, rpc_observer=records.append)
                )
            await server.stop(0)

        asyncio.run(make())
    finally:
        plane.close()
