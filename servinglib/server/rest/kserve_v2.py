"""KServe V2 (Open Inference Protocol) REST: health, metadata, config, ready, infer, repository."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, final

import numpy as np
import numpy.typing as npt

from servinglib.codecs import decode_raw, encode_raw, numpy_to_v2_datatype, v2_datatype_to_numpy
from servinglib.codecs.limits import DecodeLimits, element_count
from servinglib.errors import InvalidArgumentError, NotFoundError, ServingError
from servinglib.request_extras import RequestExtras, request_extras_scope
from servinglib.response_extras import response_extras_scope
from servinglib.server.management.model_management import ModelManagement
from servinglib.server.management.repository import ModelRepository
from servinglib.server.observe.statistics import StatisticDuration, VersionStatistics
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.rest import json_codec
from servinglib.server.rest.exchange import RestRequest, RestResponse
from servinglib.server.rest.options import RestOptions
from servinglib.server.rest.tensor_json import json_type, numbers_to_json, strings_to_json, to_array

HEADER_LENGTH = b"inference-header-content-length"
_OCTET_STREAM = b"application/octet-stream"


@final
class KServeV2Api:
    """The KServe V2 REST endpoints over one ServerCore and DataPlane.

    Each method is a handler (:data:`~servinglib.server.rest.exchange.Handler`).
    Thread-safe: holds no mutable state.
    """

    def __init__(
        self, plane: DataPlane, options: RestOptions, management: ModelManagement | None = None
    ) -> None:
        self._plane = plane
        self._decode_limits = options.decode_limits
        self._header_forwarding = options.header_forwarding
        management = management if management is not None else ModelManagement(plane.core)
        self._repository = ModelRepository(plane.core, management)
        self._server_metadata = json_codec.dumps(
            {
                "name": options.server_name,
                "version": options.server_version,
                "extensions": [
                    "binary_tensor_data",
                    "model_configuration",
                    "model_repository",
                    "statistics",
                ],
            }
        )

    async def server_metadata(self, _request: RestRequest) -> RestResponse:
        """``GET /v2``: server name, version and extensions."""
        return RestResponse(200, self._server_metadata)

    async def live(self, _request: RestRequest) -> RestResponse:
        """``GET /v2/health/live``: 200 while the process serves HTTP."""
        return RestResponse.json({"live": True})

    async def ready(self, _request: RestRequest) -> RestResponse:
        """``GET /v2/health/ready``: 200 when every configured model is available, else 503."""
        ready = self._plane.questions.server_ready()
        return RestResponse.json({"ready": ready}, 200 if ready else 503)

    async def list_models(self, _request: RestRequest) -> RestResponse:
        """``GET /v2/models``: the names of the configured models."""
        return RestResponse.json({"models": self._plane.questions.list_models()})

    async def repository_index(self, request: RestRequest) -> RestResponse:
        """``POST /v2/repository/index``: every model version with its state (``ready`` filters)."""
        ready_only = False
        if request.body.strip():
            ready_only = request.json_object().get("ready", False) is True
        index: list[dict[str, Any]] = []
        for entry in self._repository.index(ready_only=ready_only):
            if not entry.state:  # a repository's model never served: Triton names it alone
                index.append({"name": entry.name})
                continue
            row = {"name": entry.name, "version": entry.version, "state": entry.state}
            if not entry.version:
                del row["version"]
            row["reason"] = entry.reason
            index.append(row)
        return RestResponse.json(index)

    async def repository_load(self, request: RestRequest) -> RestResponse:
        """``POST /v2/repository/models/{m}/load``: (re)loads a model; waits until it serves.

        The body, optional, is ``{"parameters": {"config": "<JSON>"}}`` as
        tritonclient sends it; see :class:`ModelRepository` for ``config``.
        """
        parameters = _string_parameters(request) if request.body.strip() else {}
        await self._repository.load(request.model_name, parameters)
        return RestResponse(200, b"")

    async def repository_unload(self, request: RestRequest) -> RestResponse:
        """``POST /v2/repository/models/{m}/unload``: takes a model out of what is served."""
        if request.body.strip():
            _parameters(request.json_object().get("parameters"), "request")
        await self._repository.unload(request.model_name)
        return RestResponse(200, b"")

    async def model_metadata(self, request: RestRequest) -> RestResponse:
        """``GET /v2/models/{m}[/versions/{v}]``: name, versions, platform, inputs, outputs."""
        return RestResponse.json(self._plane.questions.v2_model_metadata(request.model_spec()))

    async def model_ready(self, request: RestRequest) -> RestResponse:
        """``GET …/ready``: 200 when the selected version can serve, else 4xx as V2 says.

        404 for a model or version this server does not know or whose load
        failed (NOT_FOUND, as the lookup says), 400 for one not serving now
        (loading, unloading, an unknown label), with why.
        """
        readiness = self._plane.questions.model_ready(request.model_spec())
        if readiness.ready:
            return RestResponse.json({"name": readiness.name, "ready": True})
        error = readiness.error
        status = 404 if isinstance(error, NotFoundError) else 400
        body = {"name": readiness.name, "ready": False}
        if error is not None:
            body["error"] = error.message
        return RestResponse.json(body, status)

    async def model_config(self, request: RestRequest) -> RestResponse:
        """``GET …/config``: a Triton model configuration (tritonclient, perf_analyzer read it)."""
        return RestResponse.json(self._plane.questions.v2_model_config(request.model_spec()))

    async def model_statistics(self, request: RestRequest) -> RestResponse:
        """``GET /v2/models[/{m}[/versions/{v}]]/stats``: Triton's statistics extension."""
        statistics = self._plane.questions.model_statistics(
            request.model_name or None, request.version
        )
        return RestResponse.json({"model_stats": [_statistics_json(s) for s in statistics]})

    async def infer(self, request: RestRequest) -> RestResponse:
        """``POST …/infer``: JSON or binary tensors in, JSON or binary tensors out; the
        response's ``parameters`` are those the model set (none: no ``parameters``)."""
        header, binary = _split_body(request)
        body = json_codec.loads(header) if header else None
        if not isinstance(body, dict):
            raise InvalidArgumentError("The inference request must be a JSON object")
        parameters = _parameters(body.get("parameters"), "request")
        tensors = _inputs(body.get("inputs"), binary, self._decode_limits)
        wanted, binary_outputs = _requested_outputs(body.get("outputs"), parameters)
        signature_name = parameters.get("signature_name")
        if signature_name is not None and not isinstance(signature_name, str):
            raise InvalidArgumentError("Parameter 'signature_name' must be a string")
        request_id = body.get("id")
        extras = RequestExtras.of_request(
            request_id if isinstance(request_id, str) else "", _scalars(parameters)
        )
        if self._header_forwarding is not None:
            extras = self._header_forwarding.extras(extras, _text_headers(request.headers))
        with request_extras_scope(extras), response_extras_scope() as response_extras:
            result = await self._plane.infer(
                request.model_spec(), signature_name, tensors, wanted, deadline=request.deadline
            )
        response: dict[str, Any] = {
            "model_name": result.model_name,
            "model_version": str(result.version),
        }
        if request_id is not None:
            response["id"] = request_id
        if response_parameters := response_extras.parameters():
            response["parameters"] = dict(response_parameters)
        names = wanted if wanted is not None else list(result.outputs)
        outputs, parts = _encode_outputs(result.outputs, names, binary_outputs)
        response["outputs"] = outputs
        encoded = json_codec.dumps(response)
        headers = tuple(
            (name.encode("latin-1"), value.encode("utf-8"))
            for name, value in response_extras.headers().items()
        )
        if not parts:
            return RestResponse(200, encoded, headers=headers)
        return RestResponse(
            200,
            b"".join([encoded, *parts]),
            _OCTET_STREAM,
            ((HEADER_LENGTH, str(len(encoded)).encode("ascii")), *headers),
        )


def _duration_json(duration: StatisticDuration) -> dict[str, int]:
    return {"count": duration.count, "ns": duration.ns}


def _statistics_json(statistics: VersionStatistics) -> dict[str, Any]:
    """One version's statistics as Triton's ``$model_stat`` object."""
    return {
        "name": statistics.name,
        "version": str(statistics.version),
        "last_inference": statistics.last_inference_ms,
        "inference_count": statistics.inference_count,
        "execution_count": statistics.execution_count,
        "inference_stats": {
            "success": _duration_json(statistics.success),
            "fail": _duration_json(statistics.fail),
            "queue": _duration_json(statistics.queue),
            "compute_input": _duration_json(statistics.compute_input),
            "compute_infer": _duration_json(statistics.compute_infer),
            "compute_output": _duration_json(statistics.compute_output),
            "cache_hit": _duration_json(statistics.cache_hit),
            "cache_miss": _duration_json(statistics.cache_miss),
        },
        "response_stats": {},
        "batch_stats": [
            {
                "batch_size": batch.batch_size,
                "compute_input": _duration_json(batch.compute_input),
                "compute_infer": _duration_json(batch.compute_infer),
                "compute_output": _duration_json(batch.compute_output),
            }
            for batch in statistics.batches
        ],
        "memory_usage": [],
    }


def _split_body(request: RestRequest) -> tuple[bytes, memoryview]:
    raw_length = request.header(HEADER_LENGTH)
    body = request.body
    if raw_length is None:
        return body, memoryview(b"")
    try:
        length = int(raw_length)
    except ValueError:
        raise InvalidArgumentError(
            f"Inference-Header-Content-Length is not an integer: {raw_length[:40]!r}"
        ) from None
    if not 0 <= length <= len(body):
        raise InvalidArgumentError(
            f"Inference-Header-Content-Length {length} is outside the body's {len(body)} bytes"
        )
    return body[:length], memoryview(body)[length:]


def _scalars(parameters: dict[str, Any]) -> dict[str, bool | int | float | str]:
    """The parameters a model may read: those of a JSON scalar value."""
    return {k: v for k, v in parameters.items() if isinstance(v, bool | int | float | str)}


def _string_parameters(request: RestRequest) -> dict[str, str]:
    """A load request's ``parameters``: each must be a string (a config, an override file)."""
    parameters = _parameters(request.json_object().get("parameters"), "request")
    for key, value in parameters.items():
        if not isinstance(value, str):
            raise InvalidArgumentError(
                f"Load parameter '{key}' must be a string, got {json_type(value)}"
            )
    return parameters


def _parameters(value: object, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidArgumentError(f"The {what}'s 'parameters' must be an object")
    return value


def _inputs(value: object, binary: memoryview, limits: DecodeLimits) -> dict[str, npt.NDArray[Any]]:
    if not isinstance(value, list) or not value:
        raise InvalidArgumentError("'inputs' must be a non-empty list of tensors")
    tensors: dict[str, npt.NDArray[Any]] = {}
    offset = 0
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            raise InvalidArgumentError(f"Input {index} must be an object, got {json_type(item)}")
        name = item.get("name")
        if not isinstance(name, str) or not name:
            raise InvalidArgumentError(f"Input {index} has no 'name' string")
        if name in tensors:
            raise InvalidArgumentError(f"Input '{name}' is given twice")
        datatype = item.get("datatype")
        if not isinstance(datatype, str):
            raise InvalidArgumentError(f"Input '{name}' has no 'datatype' string")
        dtype = v2_datatype_to_numpy(datatype)
        shape = _shape(item.get("shape"), name)
        count = element_count(shape, f"Input '{name}'", limits)
        size = _binary_size(_parameters(item.get("parameters"), f"input '{name}'"), name)
        if size is not None:
            if item.get("data") is not None:
                raise InvalidArgumentError(
                    f"Input '{name}' has both 'data' and binary data (binary_data_size): send "
                    "it one way"
                )
            if offset + size > len(binary):
                raise InvalidArgumentError(
                    f"Input '{name}' claims {size} bytes of binary data, but only "
                    f"{len(binary) - offset} remain"
                )
            tensors[name] = decode_raw(
                datatype, shape, binary[offset : offset + size], name=name, limits=limits
            )
            offset += size
            continue
        if "data" not in item:
            raise InvalidArgumentError(f"Input '{name}' has neither 'data' nor binary data")
        tensors[name] = _json_data(item["data"], dtype, shape, count, name)
    if offset != len(binary):
        raise InvalidArgumentError(
            f"{len(binary) - offset} bytes of binary data follow the inputs unclaimed"
        )
    return tensors


def _shape(value: object, name: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in value
    ):
        raise InvalidArgumentError(f"Input '{name}' needs a 'shape' list of non-negative integers")
    return tuple(value)


def _binary_size(parameters: dict[str, Any], name: str) -> int | None:
    size = parameters.get("binary_data_size")
    if size is None:
        return None
    if not isinstance(size, int) or isinstance(size, bool) or size < 0:
        raise InvalidArgumentError(
            f"Input '{name}': binary_data_size must be a non-negative integer"
        )
    return size


def _json_data(
    data: object, dtype: np.dtype[Any], shape: tuple[int, ...], count: int, name: str
) -> npt.NDArray[Any]:
    array = to_array(data, dtype, f"Input '{name}'")
    if array.size != count:
        raise InvalidArgumentError(
            f"Input '{name}' has {array.size} elements in 'data', but shape {list(shape)} "
            f"needs {count}"
        )
    return array.reshape(shape)


def _requested_outputs(
    value: object, parameters: dict[str, Any]
) -> tuple[list[str] | None, set[str] | bool]:
    """The outputs asked for (None: all) and which go binary (a set, or a bool for all)."""
    binary_default = parameters.get("binary_data_output", False) is True
    if value is None:
        return None, binary_default
    if not isinstance(value, list):
        raise InvalidArgumentError("'outputs' must be a list of {\"name\": ...} objects")
    names: list[str] = []
    binary: set[str] = set()
    for index, item in enumerate(value):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            raise InvalidArgumentError(f"Requested output {index} must be an object with a name")
        name = item["name"]
        names.append(name)
        flag = _parameters(item.get("parameters"), f"output '{name}'").get("binary_data")
        if flag is True or (flag is None and binary_default):
            binary.add(name)
    return (names or None), (binary if names else binary_default)


def _encode_outputs(
    outputs: dict[str, npt.NDArray[Any]], names: list[str], binary: set[str] | bool
) -> tuple[list[dict[str, Any]], list[bytes]]:
    encoded: list[dict[str, Any]] = []
    parts: list[bytes] = []
    for name in dict.fromkeys(names):
        array = outputs[name]
        try:
            datatype = numpy_to_v2_datatype(array.dtype)
        except ServingError as error:
            raise InvalidArgumentError(f"Output '{name}': {error.message}") from None
        entry: dict[str, Any] = {"name": name, "datatype": datatype, "shape": list(array.shape)}
        if binary is True or (isinstance(binary, set) and name in binary):
            _, raw = encode_raw(array)
            entry["parameters"] = {"binary_data_size": len(raw)}
            parts.append(raw)
        elif datatype == "BYTES":
            entry["data"] = strings_to_json(array.reshape(-1), as_b64=False)
        else:
            entry["data"] = numbers_to_json(array.reshape(-1))
        encoded.append(entry)
    return encoded, parts


def _text_headers(headers: Iterable[tuple[bytes, bytes]]) -> Iterator[tuple[str, str]]:
    """An ASGI scope's headers as text (HTTP headers are Latin-1)."""
    for name, value in headers:
        yield name.decode("latin-1"), value.decode("latin-1")
