"""The bounds of bench/rest.py: every step a ``:predict`` must take, in one flat function.

``python bench/_rest_bound.py --port=P --config=models.config`` serves, on the CLI's stack
(``RestServer``: uvicorn's listener, our httptools connections, uvloop), an ASGI function that
answers any GET with ``{}`` (the readiness probe) and ``POST
/v1/models/{plus_one_inline,plus_one}:predict`` by doing, with no layer in between, only what the
REST front end has to do for that request:

- read the body, and set a deadline 30 s out (``--rest_api_timeout_in_ms``'s default);
- parse the JSON (orjson), check it is an object with ``instances``, and turn the instances into a
  float32 array: numbers only, overflow checked (``np.errstate``), as TF Serving refuses ``"1"``
  and ``1e300`` for a float tensor;
- ``plus_one_inline``: take a handle from the ServerCore (the version stays loaded while the call
  runs), resolve the signature, call it through ``call_resolved`` (inputs checked against the
  signature, outputs checked against it) under the request's deadline, and release the handle;
  ``plus_one`` (``thread`` mode): the same through ``DataPlane.infer``, which adds the one hop to
  its worker pool and back;
- write the outputs with orjson, checking for a non-finite value (orjson writes ``null``);
- send the response, and record the request in the Prometheus metrics (``observe_request``).

Everything else the real app does (routing every endpoint, error mapping, labels, both protocols,
the signature cache) is left out, and the paths and models are fixed. Its req/s over the floor's
is therefore a ceiling for what each execution mode can reach on this machine: the part of the
floor ratio that the request's own work, not servinglib's structure, costs.
"""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
from _servers import run_bound

from servinglib.errors import InvalidArgumentError, StatusCode
from servinglib.servable import Tensors, call_resolved, deadline_scope, resolve_signature
from servinglib.server import ModelSpec, ServerCore
from servinglib.server.observe.metrics import ServerMetrics
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.rest import RestServer

INLINE, THREAD = "plus_one_inline", "plus_one"
TIMEOUT_S = 30.0


async def serve(port: int, core: ServerCore) -> None:
    metrics = ServerMetrics()
    plane = DataPlane(core)
    specs = {f"/v1/models/{name}:predict": ModelSpec(name, None, None) for name in (INLINE, THREAD)}
    float32 = np.dtype(np.float32)
    json_type = (b"content-type", b"application/json")

    async def app(scope: Any, receive: Any, send: Any) -> None:  # noqa: ANN401 - ASGI
        if scope["type"] != "http":
            return
        started = time.perf_counter()
        if scope["method"] == "GET":  # the readiness probe of bench/rest.py
            await send({"type": "http.response.start", "status": 200, "headers": [json_type]})
            await send({"type": "http.response.body", "body": b"{}"})
            return
        spec = specs.get(scope["path"])
        if spec is None:
            raise InvalidArgumentError(f"the bound serves only {sorted(specs)}")
        message = await receive()
        deadline = time.monotonic() + TIMEOUT_S
        document = orjson.loads(message["body"])
        if type(document) is not dict or "instances" not in document:
            raise InvalidArgumentError("expected an object with 'instances'")
        numbers = np.asarray(document["instances"])
        if numbers.dtype.kind not in "iuf":
            raise InvalidArgumentError("'instances' are not numbers")
        with np.errstate(over="raise"):
            x = numbers.astype(float32)
        if spec.name == INLINE:
            outputs = call_inline(core, spec, {"x": x}, deadline)
        else:
            outputs = (await plane.infer(spec, None, {"x": x}, deadline=deadline)).outputs
        (y,) = outputs.values()
        body = orjson.dumps({"predictions": y}, option=orjson.OPT_SERIALIZE_NUMPY)
        if b"null" in body:
            raise InvalidArgumentError("a non-finite output: the bound does not write those")
        headers = [json_type, (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
        metrics.observe_request(
            spec.name, "predict", "REST", StatusCode.OK, time.perf_counter() - started
        )

    server = RestServer(app, "127.0.0.1", port)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, server.stop)
    try:
        await server.serve()
    finally:
        plane.close()


def call_inline(
    core: ServerCore, spec: ModelSpec, inputs: Tensors, deadline: float
) -> dict[str, npt.NDArray[Any]]:
    """The call's required steps: handle, signature, checked call under the deadline, release."""
    handle = core.servable_handle(spec)
    try:
        servable = handle.servable
        name, signature = resolve_signature(servable, None)
        with deadline_scope(deadline):
            return call_resolved(servable, name, signature, inputs)
    finally:
        handle.release()


if __name__ == "__main__":
    run_bound(__doc__, serve)
