"""Both gRPC servers (grpcio's synchronous one, grpc.aio): the choice, no deadline, batches."""

from __future__ import annotations

import concurrent.futures
import threading
from collections.abc import Iterator

import attrs
import grpc
import numpy as np
import pytest
from grpc_servers import serving
from tritonclient.grpc import service_pb2, service_pb2_grpc

from servinglib.batching import BatchingParameters
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.grpc import GrpcServerOptions
from servinglib.server.grpc.options import SERVERS
from servinglib.server.server_core import ServerCore
from servinglib.testing import write_python_model
from servinglib.testing.plugin import TEST_SERVER_CORE_OPTIONS

BATCHED_MODEL_PY = """
import numpy as np
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    @signature(name="serving_default", inputs=[TensorSpec("x", "float32", [-1, 4])],
               outputs=[TensorSpec("y", "float32", [-1, 4])])
    def plus_one(self, x):
        return {"y": x + 1}
"""

CLIENTS = 16


@pytest.fixture(scope="module")
def batched_core(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerCore]:
    """A core serving one Python model batched (up to 16 rows, 200 ms to fill a batch)."""
    root = tmp_path_factory.mktemp("batched")
    write_python_model(root, "b", BATCHED_MODEL_PY)
    options = attrs.evolve(
        TEST_SERVER_CORE_OPTIONS,
        batching_parameters=BatchingParameters(
            max_batch_size=CLIENTS, batch_timeout_s=0.2, num_batch_threads=1
        ),
    )
    config = ModelServerConfig([ModelConfig("b", str(root / "b"), "python")])
    with ServerCore(config, options) as core:
        yield core


def infer(channel: grpc.Channel, value: float, timeout_s: float | None) -> np.ndarray:
    """V2 ModelInfer of one row [value] * 4 on model b (no deadline when ``timeout_s`` is None)."""
    request = service_pb2.ModelInferRequest(model_name="b")
    request.inputs.add(name="x", datatype="FP32", shape=[1, 4])
    request.raw_input_contents.append(np.full((1, 4), value, np.float32).tobytes())
    stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
    response = stub.ModelInfer(request, timeout=timeout_s)
    return np.frombuffer(response.raw_output_contents[0], np.float32)


def test_the_options_choose_the_server() -> None:
    """GrpcServerOptions.server is sync by default, aio on request, and nothing else."""
    assert GrpcServerOptions().server == SERVERS[0] == "sync"
    assert GrpcServerOptions(server="aio").server == "aio"
    with pytest.raises(ValueError, match="server"):
        GrpcServerOptions(server="twisted")
    with pytest.raises(ValueError, match="max_threads"):
        GrpcServerOptions(max_threads=0)


@pytest.mark.parametrize("kind", SERVERS)
def test_concurrent_calls_without_deadline_share_batches(
    batched_core: ServerCore, kind: str
) -> None:
    """Clients sending no deadline are answered on both servers, their rows merged in batches."""
    sizes: list[int] = []
    scheduler = batched_core.batch_scheduler
    assert scheduler is not None
    scheduler.add_observer(lambda record: sizes.append(record.size))
    start = threading.Barrier(CLIENTS)
    with serving(batched_core, server=kind) as served, served.channel() as channel:
        assert served.server.kind == kind
        assert list(infer(channel, 0.0, None)) == [1.0] * 4  # alone: no deadline at all

        def client(value: int) -> np.ndarray:
            start.wait(timeout=30)
            return infer(channel, float(value), 30.0)

        with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
            answers = list(pool.map(client, range(CLIENTS)))
    assert [list(a) for a in answers] == [[v + 1.0] * 4 for v in range(CLIENTS)]
    assert max(sizes) > 1  # requests from several RPC threads (or coroutines) shared a batch


def test_a_deadline_shorter_than_the_batch_wait_fails_alone(batched_core: ServerCore) -> None:
    """On the synchronous server a call whose deadline ends before its batch runs fails
    DEADLINE_EXCEEDED, and the next call is answered."""
    with serving(batched_core, server="sync") as served, served.channel() as channel:
        request = service_pb2.ModelInferRequest(model_name="b")
        request.inputs.add(name="x", datatype="FP32", shape=[1, 4])
        request.raw_input_contents.append(np.zeros((1, 4), np.float32).tobytes())
        call = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer.future(
            request, timeout=0.05
        )
        with pytest.raises(grpc.RpcError) as caught:
            call.result(timeout=30)
        assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        assert list(infer(channel, 1.0, 30.0)) == [2.0] * 4
