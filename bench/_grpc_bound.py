"""The bound of bench/grpc.py: every step an inline V2 ``ModelInfer`` must take, in one function.

``python bench/_grpc_bound.py --port=P --config=models.config`` serves, on the CLI's stack
(grpc.aio on uvloop), ``inference.GRPCInferenceService/ModelInfer`` with one coroutine that does,
inline and with no layer in between, only what the gRPC front end has to do for a V2 request
with raw input contents:

- parse the ModelInferRequest (protobuf), take the RPC's deadline from the context;
- check the one input's datatype and shape, and view its raw bytes as a float32 array
  (``np.frombuffer``, the byte count checked by the reshape);
- take a handle from the ServerCore, resolve the signature, call it through ``call_resolved``
  (inputs and outputs checked against the signature) under the deadline, release the handle;
- build and serialize the ModelInferResponse (the output's raw bytes);
- record the request in the Prometheus metrics (``observe_request``).

Everything else the real servicer does (both services, every datatype and the typed contents,
requested outputs, parameters, error mapping, each execution mode) is left out, and the model is
fixed.  Its req/s over the bare servicer's is therefore a ceiling for what ``inline`` can reach on
this machine.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from _servers import run_bound

# bench/grpc.py, beside this file, would shadow grpcio: drop this directory from sys.path first.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import grpc  # noqa: E402
import grpc.aio  # noqa: E402

from servinglib.errors import InvalidArgumentError, StatusCode  # noqa: E402
from servinglib.protos import grpc_service_pb2  # noqa: E402
from servinglib.servable import call_resolved, deadline_scope, resolve_signature  # noqa: E402
from servinglib.server import ModelSpec, ServerCore  # noqa: E402
from servinglib.server.observe.metrics import ServerMetrics  # noqa: E402

MODEL = "plus_one_inline"


async def serve(port: int, core: ServerCore) -> None:
    metrics = ServerMetrics()
    spec = ModelSpec(MODEL, None, None)
    float32 = np.dtype(np.float32)
    response_type = grpc_service_pb2.ModelInferResponse

    async def infer(
        request: grpc_service_pb2.ModelInferRequest,
        context: Any,  # noqa: ANN401 - grpc's context
    ) -> grpc_service_pb2.ModelInferResponse:
        started = time.perf_counter()
        remaining = context.time_remaining()
        deadline = None if remaining is None else time.monotonic() + remaining
        if request.model_name != MODEL or len(request.inputs) != 1:
            raise InvalidArgumentError(f"the bound serves one input of {MODEL}")
        tensor = request.inputs[0]
        if tensor.datatype != "FP32" or len(request.raw_input_contents) != 1:
            raise InvalidArgumentError("the bound takes one FP32 tensor in raw contents")
        shape = tuple(tensor.shape)
        x = np.frombuffer(request.raw_input_contents[0], dtype=float32).reshape(shape)
        handle = core.servable_handle(spec)
        try:
            servable = handle.servable
            version = handle.id.version
            name, signature = resolve_signature(servable, None)
            with deadline_scope(deadline):
                outputs = call_resolved(servable, name, signature, {tensor.name: x})
        finally:
            handle.release()
        response = response_type(model_name=MODEL, model_version=str(version))
        for output_name, value in outputs.items():
            response.outputs.add(name=output_name, datatype="FP32", shape=value.shape)
            response.raw_output_contents.append(value.tobytes())
        metrics.observe_request(
            MODEL, "predict", "GRPC", StatusCode.OK, time.perf_counter() - started
        )
        return response

    handler = grpc.method_handlers_generic_handler(
        "inference.GRPCInferenceService",
        {
            "ModelInfer": grpc.unary_unary_rpc_method_handler(
                infer,
                request_deserializer=grpc_service_pb2.ModelInferRequest.FromString,
                response_serializer=response_type.SerializeToString,
            )
        },
    )

    server = grpc.aio.server()
    server.add_generic_rpc_handlers([handler])
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, lambda: loop.create_task(server.stop(0)))
    await server.wait_for_termination()


if __name__ == "__main__":
    run_bound(__doc__, serve)
