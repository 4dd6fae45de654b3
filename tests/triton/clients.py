"""Calls through tritonclient.http and .grpc, their answers reduced to comparable values.

One client per protocol per server, shared by the calls, as tritonclient's users do.
"""

from __future__ import annotations

import queue
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt
import tritonclient.grpc
import tritonclient.http
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

PROTOCOLS = ("http", "grpc")

Answer = dict[str, Any]
"""``{"outputs": {name: list}}`` or ``{"error": status, "message": text}``."""


class Clients:
    """An HTTP and a gRPC tritonclient to one server.  Not thread-safe (tests call in turn)."""

    def __init__(self, http_url: str, grpc_url: str) -> None:
        self.http_url = http_url
        self.grpc_url = grpc_url
        self.http = tritonclient.http.InferenceServerClient(http_url)
        self.grpc = tritonclient.grpc.InferenceServerClient(grpc_url)

    def close(self) -> None:
        """Closes both clients."""
        self.http.close()
        self.grpc.close()

    def __enter__(self) -> Clients:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def client(self, protocol: str) -> Any:
        """The client of ``protocol`` ("http" or "grpc")."""
        return self.http if protocol == "http" else self.grpc

    def infer(
        self,
        protocol: str,
        model: str,
        inputs: Mapping[str, npt.NDArray[Any]],
        outputs: Sequence[str] = (),
        **options: Any,
    ) -> Answer:
        """The answer of ``model`` to ``inputs`` (datatypes from their numpy dtypes)."""
        module = tritonclient.http if protocol == "http" else tritonclient.grpc
        infer_inputs = []
        for name, value in inputs.items():
            tensor = module.InferInput(name, list(value.shape), np_to_triton_dtype(value.dtype))
            tensor.set_data_from_numpy(value)
            infer_inputs.append(tensor)
        requested = [module.InferRequestedOutput(name) for name in outputs] or None
        try:
            result = self.client(protocol).infer(model, infer_inputs, outputs=requested, **options)
        except InferenceServerException as error:
            return {"error": error.status(), "message": error.message()}
        response = result.get_response()
        if protocol == "http":
            names = [output["name"] for output in response.get("outputs", [])]
        else:
            names = [output.name for output in response.outputs]
        return {"outputs": {name: _plain(result.as_numpy(name)) for name in sorted(names)}}

    def metadata(self, protocol: str, model: str) -> dict[str, Any]:
        """The model's metadata: inputs and outputs (name, datatype, shape) and versions."""
        if protocol == "http":
            raw = self.http.get_model_metadata(model)
        else:
            raw = self.grpc.get_model_metadata(model, as_json=True)
        return {
            "name": raw["name"],
            "versions": raw.get("versions", []),
            "inputs": [_tensor(t) for t in raw.get("inputs", [])],
            "outputs": [_tensor(t) for t in raw.get("outputs", [])],
        }

    def stream(
        self,
        model: str,
        inputs: Mapping[str, npt.NDArray[Any]],
        timeout_s: float = 30.0,
        headers: Mapping[str, str] | None = None,
    ) -> list[Answer]:
        """The responses of a gRPC ModelStreamInfer request, up to the one flagged final
        (``headers``: the stream's metadata)."""
        responses: queue.SimpleQueue[tuple[Any, Any]] = queue.SimpleQueue()
        infer_inputs = []
        for name, value in inputs.items():
            tensor = tritonclient.grpc.InferInput(
                name, list(value.shape), np_to_triton_dtype(value.dtype)
            )
            tensor.set_data_from_numpy(value)
            infer_inputs.append(tensor)
        self.grpc.start_stream(
            callback=lambda result, error: responses.put((result, error)), headers=headers
        )
        try:
            self.grpc.async_stream_infer(model, infer_inputs, enable_empty_final_response=True)
            return list(_until_final(responses, timeout_s))
        finally:
            self.grpc.stop_stream()


def _until_final(
    responses: queue.SimpleQueue[tuple[Any, Any]], timeout_s: float
) -> Iterator[Answer]:
    while True:
        result, error = responses.get(timeout=timeout_s)
        if error is not None:
            yield {"error": error.status(), "message": error.message()}
            return
        response = result.get_response()
        final = response.parameters["triton_final_response"].bool_param
        if response.outputs:
            yield {
                "outputs": {
                    o.name: _plain(result.as_numpy(o.name))
                    for o in sorted(response.outputs, key=lambda o: o.name)
                }
            }
        if final:
            return


def _tensor(tensor: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "name": tensor["name"],
        "datatype": tensor["datatype"],
        "shape": [int(d) for d in tensor["shape"]],
    }


def _plain(array: npt.NDArray[Any] | None) -> Any:
    if array is None:
        return None
    if array.dtype == np.object_:
        return [bytes(item).decode("utf-8", "replace") for item in array.ravel()]
    return array.tolist()
