"""The bound of bench/triton.py's batched HTTP cell: only the steps that cell must take.

``python bench/_triton_bound.py --port=P --repository=DIR`` serves, on the CLI's stack
(``RestServer``: uvicorn's listener, our httptools connections, uvloop), one ASGI function that
answers ``POST /v2/models/batched/infer`` by doing, with no layer in between, only what serving
that request through Triton's dynamic batcher has to do:

- read the body, set a deadline 30 s out (``--rest_api_timeout_in_ms``'s default);
- parse the V2 JSON (orjson), check the one input against the config (name ``X``, ``FP32``,
  shape ``[n, 16]``, as many numbers as the shape says) and turn it into a float32 array:
  numbers only, overflow checked, as servinglib's V2 front end does;
- queue it for the batch: the first request of a batch starts a 2 ms timer
  (``max_queue_delay_microseconds``), the 64th row runs the batch at once;
- run the batch *on the event loop* (no thread, no hand-over): one ``pb_utils.InferenceRequest``
  per request, the repository's own ``model.py`` ``execute``, each response's ``Y`` handed to
  its request's future;
- write the V2 response with orjson, send it, and record the request in the Prometheus metrics.

It also answers ``GET /v2/health/ready`` and ``GET /v2/models/batched/stats`` (successes and
executions, as V2 statistics), which the benchmark reads. Everything else a server does
(routing, statistics per request, deadlines enforced while queued, request ids, tracing, error
mapping, every other model and endpoint) is left out. Its req/s is therefore a ceiling for any
server written in Python on this stack: what the cell's own work costs, and nothing more.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import signal
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from servinglib.errors import InvalidArgumentError, StatusCode
from servinglib.loaders.triton.backend_utils_import import backend_utils_importable
from servinglib.loaders.triton.pb_request import InferenceRequest
from servinglib.loaders.triton.pb_types import Tensor
from servinglib.servable import deadline_exceeded
from servinglib.server.observe.metrics import ServerMetrics
from servinglib.server.rest import RestServer

MODEL = "batched"
INFER_PATH = f"/v2/models/{MODEL}/infer"
STATS_PATH = f"/v2/models/{MODEL}/stats"
MAX_ROWS = 64
MAX_DELAY_S = 0.002
TIMEOUT_S = 30.0
JSON_TYPE = (b"content-type", b"application/json")


def load_model(repository: Path) -> Any:  # noqa: ANN401 - the user's TritonPythonModel
    """The repository's ``batched/1/model.py``, imported as servinglib imports it."""
    path = repository / MODEL / "1" / "model.py"
    with backend_utils_importable():
        spec = importlib.util.spec_from_file_location("bound_model", path)
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return module.TritonPythonModel()


def to_row_batch(document: Any) -> np.ndarray:  # noqa: ANN401 - a JSON value
    """The request's ``X`` as float32 [n, 16], checked as the V2 front end checks it."""
    if type(document) is not dict or type(document.get("inputs")) is not list:
        raise InvalidArgumentError("expected an object with 'inputs'")
    (tensor,) = document["inputs"]
    if tensor.get("name") != "X" or tensor.get("datatype") != "FP32":
        raise InvalidArgumentError("the model takes one FP32 input X")
    shape = tensor["shape"]
    if len(shape) != 2 or shape[1] != 16 or not 0 < shape[0] <= MAX_ROWS:
        raise InvalidArgumentError(f"X has shape {shape}, expected [-1, 16]")
    numbers = np.asarray(tensor["data"])
    if numbers.dtype.kind not in "iuf" or numbers.size != shape[0] * 16:
        raise InvalidArgumentError("X's data are not as many numbers as its shape says")
    with np.errstate(over="raise"):
        return numbers.astype(np.float32).reshape(shape)


class Bound:
    """The one ASGI function and its batch: everything the event loop's thread touches."""

    def __init__(self, model: Any) -> None:  # noqa: ANN401 - the user's TritonPythonModel
        self._loop = asyncio.get_running_loop()
        self._model = model
        self._metrics = ServerMetrics()
        self._queued: list[tuple[np.ndarray, asyncio.Future[np.ndarray]]] = []
        self._rows = 0
        self._timer: asyncio.TimerHandle | None = None
        self._successes = 0
        self._executions = 0

    def _run_batch(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        batch = self._queued[:]
        self._queued.clear()
        self._rows = 0
        requests = [
            InferenceRequest(MODEL, [Tensor("X", x)], ["Y"], model_version=1) for x, _ in batch
        ]
        responses = self._model.execute(requests)
        self._executions += 1
        for (_, future), response in zip(batch, responses, strict=True):
            if not future.done():
                future.set_result(response.output_tensors()[0].as_numpy())

    async def _infer(self, body: bytes) -> bytes:
        deadline = time.monotonic() + TIMEOUT_S
        x = to_row_batch(orjson.loads(body))
        future: asyncio.Future[np.ndarray] = self._loop.create_future()
        self._queued.append((x, future))
        self._rows += len(x)
        if self._rows >= MAX_ROWS:
            self._run_batch()
        elif self._timer is None:
            self._timer = self._loop.call_later(MAX_DELAY_S, self._run_batch)
        y = await future
        if time.monotonic() > deadline:
            raise deadline_exceeded()
        self._successes += 1
        output = {"name": "Y", "datatype": "FP32", "shape": list(y.shape), "data": y.ravel()}
        reply = {"model_name": MODEL, "model_version": "1", "outputs": [output]}
        return orjson.dumps(reply, option=orjson.OPT_SERIALIZE_NUMPY)

    def _stats(self) -> bytes:
        stats = {
            "inference_stats": {"success": {"count": self._successes}},
            "execution_count": self._executions,
        }
        return orjson.dumps({"model_stats": [stats]})

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:  # noqa: ANN401 - ASGI
        if scope["type"] != "http":
            return
        started = time.perf_counter()
        path = scope["path"]
        if scope["method"] == "GET":  # readiness and statistics, for bench/triton.py
            answer = self._stats() if path == STATS_PATH else b"{}"
            await send({"type": "http.response.start", "status": 200, "headers": [JSON_TYPE]})
            await send({"type": "http.response.body", "body": answer})
            return
        if path != INFER_PATH:
            raise InvalidArgumentError(f"the bound serves only {INFER_PATH}")
        message = await receive()
        body = await self._infer(message["body"])
        headers = [JSON_TYPE, (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        latency = time.perf_counter() - started
        self._metrics.observe_request(MODEL, "infer", "REST", StatusCode.OK, latency)


async def serve(port: int, repository: Path) -> None:
    server = RestServer(Bound(load_model(repository)), "127.0.0.1", port)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, server.stop)
    await server.serve()


def main() -> None:
    import uvloop

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--repository", type=Path, required=True)
    arguments = parser.parse_args()
    uvloop.run(serve(arguments.port, arguments.repository))


if __name__ == "__main__":
    main()
