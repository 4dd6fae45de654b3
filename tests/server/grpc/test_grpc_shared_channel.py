"""Many threads sharing one channel: every RPC multiplexed on one HTTP/2 connection is served.

This is how tritonclient's InferenceServerClient, a TF Serving stub shared by
threads, asyncio clients and a sidecar proxy call a server.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import threading
from collections.abc import Callable

import grpc
import numpy as np
import pytest
from grpc_servers import Served, serving
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc
from tritonclient.grpc import service_pb2, service_pb2_grpc

from servinglib.server.server_core import ServerCore

THREADS = 16
CALLS_PER_THREAD = 100


def predict(channel: grpc.Channel) -> None:
    """One TF Serving Predict of python_half_plus_two; checks the answer."""
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "python_half_plus_two"
    request.inputs["x"].dtype = 1  # DT_FLOAT
    request.inputs["x"].tensor_shape.dim.add().size = 3
    request.inputs["x"].float_val.extend([1.0, 2.0, 5.0])
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    response = stub.Predict(request, timeout=30)
    assert list(response.outputs["y"].float_val) == [2.5, 3.0, 4.5]


def model_infer(channel: grpc.Channel) -> None:
    """One V2 ModelInfer of python_half_plus_two with raw contents; checks the answer."""
    request = service_pb2.ModelInferRequest(model_name="python_half_plus_two")
    request.inputs.add(name="x", datatype="FP32", shape=[3])
    request.raw_input_contents.append(np.array([1, 2, 5], np.float32).tobytes())
    response = service_pb2_grpc.GRPCInferenceServiceStub(channel).ModelInfer(request, timeout=30)
    assert list(np.frombuffer(response.raw_output_contents[0], np.float32)) == [2.5, 3.0, 4.5]


@pytest.mark.parametrize("call", [predict, model_infer], ids=["Predict", "ModelInfer"])
def test_threads_sharing_one_channel_are_all_answered(
    channel: grpc.Channel, call: Callable[[grpc.Channel], None]
) -> None:
    """16 threads making 100 unary calls each on one shared channel: none fails (the synchronous
    server refused most of them with REFUSED_STREAM once its threads kept finished RPCs)."""
    assert not calls_failing(channel, call, threads=THREADS)


def calls_failing(
    channel: grpc.Channel, call: Callable[[grpc.Channel], None], *, threads: int
) -> collections.Counter[str]:
    """Runs ``call`` CALLS_PER_THREAD times on each of ``threads`` threads sharing ``channel``;
    the failures by code and message."""
    call(channel)
    start = threading.Barrier(threads)
    failures: collections.Counter[str] = collections.Counter()

    def client() -> None:
        start.wait(timeout=30)
        for _ in range(CALLS_PER_THREAD):
            try:
                call(channel)
            except grpc.RpcError as error:
                failures[f"{error.code().name}: {error.details()}"] += 1

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        for done in [pool.submit(client) for _ in range(threads)]:
            done.result()
    return failures


def test_server_threads_keep_no_finished_rpc(core: ServerCore) -> None:
    """With 16 streams per connection and 64 server threads, 8 threads sharing a channel are
    all answered: a synchronous server's thread lets its finished RPC go (a thread that kept
    it kept its stream counted as open, and the connection's streams ran out)."""
    streams = [("grpc.max_concurrent_streams", 16)]
    with (
        serving(core, server="sync", channel_arguments=streams) as served,
        served.channel() as channel,
    ):
        assert not calls_failing(channel, predict, threads=8)


def test_an_asyncio_client_with_many_calls_in_flight_is_answered(served: Served) -> None:
    """A grpc.aio client with 640 ModelInfer calls in flight on one channel: all answered."""

    async def run() -> int:
        async with grpc.aio.insecure_channel(served.address) as channel:
            stub = service_pb2_grpc.GRPCInferenceServiceStub(channel)
            request = service_pb2.ModelInferRequest(model_name="python_half_plus_two")
            request.inputs.add(name="x", datatype="FP32", shape=[3])
            request.raw_input_contents.append(np.array([1, 2, 5], np.float32).tobytes())
            answers = await asyncio.gather(
                *(stub.ModelInfer(request, timeout=30) for _ in range(640)),
                return_exceptions=True,
            )
        return sum(isinstance(answer, BaseException) for answer in answers)

    assert asyncio.run(run()) == 0
