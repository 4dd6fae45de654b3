"""KServe V2's GRPCInferenceService, with Triton's configuration, repository and statistics."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, final

import attrs
import numpy.typing as npt
from google.protobuf import json_format

from servinglib.codecs.limits import DEFAULT_LIMITS, DecodeLimits
from servinglib.errors import InvalidArgumentError, UnimplementedError
from servinglib.protos import grpc_service_pb2 as v2
from servinglib.request_extras import NO_EXTRAS, RequestExtras, request_extras_scope
from servinglib.response_extras import response_extras_scope
from servinglib.server.grpc._convert import cached_spec, deadline_of
from servinglib.server.grpc._rpc import Context, Rpc
from servinglib.server.grpc._step import Step, Steps, blocking
from servinglib.server.grpc._v2_tensors import decode_inputs, encode_outputs
from servinglib.server.header_forwarding import HeaderForwarding
from servinglib.server.management.model_management import ModelManagement
from servinglib.server.management.repository import ModelRepository
from servinglib.server.model_spec import ModelSpec
from servinglib.server.observe.statistics import StatisticDuration
from servinglib.server.plane.data_plane import DataPlane

SERVICE: Final = "inference.GRPCInferenceService"
SERVER_NAME: Final = "servinglib"
EXTENSIONS: Final = ("model_configuration", "model_repository", "statistics")
SIGNATURE_PARAMETER: Final = "signature_name"
"""A request parameter (string) choosing the signature; default ``serving_default``."""


@final
class InferenceServicer:
    """The V2 inference protocol over a DataPlane.

    ModelInfer takes typed or raw input contents and answers with raw output
    contents, as Triton does; the signature is ``serving_default`` unless the
    request parameter ``signature_name`` names another.  ``management``
    allows or refuses the repository's loads and unloads.
    Thread-safe: its state is the repository's, which is thread-safe.
    """

    def __init__(
        self,
        plane: DataPlane,
        management: ModelManagement,
        *,
        server_version: str = "",
        decode_limits: DecodeLimits = DEFAULT_LIMITS,
        header_forwarding: HeaderForwarding | None = None,
    ) -> None:
        self._plane = plane
        self._decode_limits = decode_limits
        self._header_forwarding = header_forwarding
        self._repository = ModelRepository(plane.core, management)
        self._server_version = server_version

    def rpcs(self) -> list[Rpc[Any]]:
        """The service's RPCs, for registration under :data:`SERVICE`."""

        def by_name(request: Any) -> str:  # noqa: ANN401 - any request with a name
            name: str = request.name
            return name

        def by_model_name(request: Any) -> str:  # noqa: ANN401 - any request with a model_name
            name: str = request.model_name
            return name

        return [
            Rpc("ServerLive", "server_live", v2.ServerLiveRequest, self.server_live),
            Rpc("ServerReady", "server_ready", v2.ServerReadyRequest, self.server_ready),
            Rpc("ModelReady", "model_ready", v2.ModelReadyRequest, self.model_ready, by_name),
            Rpc(
                "ServerMetadata", "server_metadata", v2.ServerMetadataRequest, self.server_metadata
            ),
            Rpc("ModelMetadata", "metadata", v2.ModelMetadataRequest, self.model_metadata, by_name),
            Rpc("ModelInfer", "infer", v2.ModelInferRequest, self.model_infer, by_model_name),
            Rpc("ModelConfig", "model_config", v2.ModelConfigRequest, self.model_config, by_name),
            Rpc(
                "ModelStatistics",
                "model_statistics",
                v2.ModelStatisticsRequest,
                self.model_statistics,
                by_name,
            ),
            Rpc(
                "RepositoryIndex",
                "repository_index",
                v2.RepositoryIndexRequest,
                self.repository_index,
            ),
            Rpc(
                "RepositoryModelLoad",
                "repository_load",
                v2.RepositoryModelLoadRequest,
                self.repository_model_load,
                by_model_name,
            ),
            Rpc(
                "RepositoryModelUnload",
                "repository_unload",
                v2.RepositoryModelUnloadRequest,
                self.repository_model_unload,
                by_model_name,
            ),
        ]

    def server_live(
        self, _request: v2.ServerLiveRequest, _context: Context
    ) -> v2.ServerLiveResponse:
        """Always live while it answers."""
        return v2.ServerLiveResponse(live=True)

    def server_ready(
        self, _request: v2.ServerReadyRequest, _context: Context
    ) -> v2.ServerReadyResponse:
        """Ready when every configured model has an available version (ServerCore.ready)."""
        return v2.ServerReadyResponse(ready=self._plane.questions.server_ready())

    def model_ready(
        self, request: v2.ModelReadyRequest, _context: Context
    ) -> v2.ModelReadyResponse:
        """Whether the version (or, without one, the latest) serves; unknown: not ready."""
        readiness = self._plane.questions.model_ready(_spec(request.name, request.version))
        return v2.ModelReadyResponse(ready=readiness.ready)

    def server_metadata(
        self, _request: v2.ServerMetadataRequest, _context: Context
    ) -> v2.ServerMetadataResponse:
        """The server's name, version and supported extensions."""
        return v2.ServerMetadataResponse(
            name=SERVER_NAME, version=self._server_version, extensions=EXTENSIONS
        )

    def model_metadata(
        self, request: v2.ModelMetadataRequest, _context: Context
    ) -> v2.ModelMetadataResponse:
        """The model's available versions, platform and default signature's tensors."""
        fields = self._plane.questions.v2_model_metadata(_spec(request.name, request.version))
        response = v2.ModelMetadataResponse(
            name=fields["name"], versions=fields["versions"], platform=fields["platform"]
        )
        for key in ("inputs", "outputs"):
            for tensor in fields[key]:
                getattr(response, key).add(
                    name=tensor["name"], datatype=tensor["datatype"], shape=tensor["shape"]
                )
        return response

    def model_infer(
        self, request: v2.ModelInferRequest, context: Context
    ) -> Steps[v2.ModelInferResponse]:
        """Runs the signature on the inputs; the requested outputs (default: all) and the
        response parameters the model set."""
        call = decode_request(request, self._decode_limits)
        if self._header_forwarding is not None:
            call = forwarded(call, self._header_forwarding, text_metadata(context))
        plane = self._plane
        with request_extras_scope(call.extras), response_extras_scope() as response_extras:
            result = yield from Step(
                plane.infer,
                plane.infer_blocking,
                call.spec,
                call.signature,
                call.inputs,
                call.requested,
                deadline=deadline_of(context),
            )
        response = encode_response(request, call, result.model_name, result.version, result.outputs)
        set_parameters(response, response_extras.parameters())
        if headers := response_extras.headers():  # (a model's response headers: trailers)
            context.set_trailing_metadata(tuple(headers.items()))
        return response

    def model_config(
        self, request: v2.ModelConfigRequest, _context: Context
    ) -> v2.ModelConfigResponse:
        """Triton's model configuration: the plane's answer, the same fields REST has."""
        fields = self._plane.questions.v2_model_config(_spec(request.name, request.version))
        response = v2.ModelConfigResponse()
        json_format.ParseDict(fields, response.config)
        return response

    def model_statistics(
        self, request: v2.ModelStatisticsRequest, _context: Context
    ) -> v2.ModelStatisticsResponse:
        """Triton's statistics of every model, one model's versions, or one version."""
        name = request.name or None
        version = _version(request.name, request.version) if name is not None else None
        response = v2.ModelStatisticsResponse()
        for statistics in self._plane.questions.model_statistics(name, version):
            entry = response.model_stats.add(
                name=statistics.name,
                version=str(statistics.version),
                last_inference=statistics.last_inference_ms,
                inference_count=statistics.inference_count,
                execution_count=statistics.execution_count,
            )
            stats = entry.inference_stats
            for field in (
                "success",
                "fail",
                "queue",
                "compute_input",
                "compute_infer",
                "compute_output",
                "cache_hit",
                "cache_miss",
            ):
                _set_duration(getattr(stats, field), getattr(statistics, field))
            for batch in statistics.batches:
                row = entry.batch_stats.add(batch_size=batch.batch_size)
                _set_duration(row.compute_input, batch.compute_input)
                _set_duration(row.compute_infer, batch.compute_infer)
                _set_duration(row.compute_output, batch.compute_output)
        return response

    def repository_index(
        self, request: v2.RepositoryIndexRequest, _context: Context
    ) -> v2.RepositoryIndexResponse:
        """Every known model's versions and states."""
        response = v2.RepositoryIndexResponse()
        for entry in self._repository.index(ready_only=request.ready):
            response.models.add(
                name=entry.name, version=entry.version, state=entry.state, reason=entry.reason
            )
        return response

    def repository_model_load(
        self, request: v2.RepositoryModelLoadRequest, _context: Context
    ) -> Steps[v2.RepositoryModelLoadResponse]:
        """Loads (or reloads) a model; see :class:`ModelRepository`."""
        parameters = {key: value.string_param for key, value in request.parameters.items()}
        yield from blocking(self._repository.load_blocking, request.model_name, parameters)
        return v2.RepositoryModelLoadResponse()

    def repository_model_unload(
        self, request: v2.RepositoryModelUnloadRequest, _context: Context
    ) -> Steps[v2.RepositoryModelUnloadResponse]:
        """Unloads a model; see :class:`ModelRepository`."""
        yield from blocking(self._repository.unload_blocking, request.model_name)
        return v2.RepositoryModelUnloadResponse()


@final
@attrs.frozen
class DecodedRequest:
    """A ModelInferRequest as the plane takes it: model, signature, inputs, outputs, and the
    id and parameters a model may read.  Immutable."""

    spec: ModelSpec
    signature: str | None
    inputs: dict[str, npt.NDArray[Any]]
    requested: list[str] | None
    extras: RequestExtras = NO_EXTRAS


Metadata = Sequence[tuple[str, str]]
"""A call's metadata as text (binary ``-bin`` values left out)."""


def text_metadata(context: Any) -> Metadata:  # noqa: ANN401 - either server's ServicerContext
    """The call's text metadata (keys lower-case, as gRPC sends them)."""
    return tuple(
        (key, value) for key, value in context.invocation_metadata() or () if isinstance(value, str)
    )


def forwarded(
    call: DecodedRequest, forwarding: HeaderForwarding, metadata: Metadata
) -> DecodedRequest:
    """``call`` with the ``metadata`` ``forwarding`` passes on among its request parameters."""
    extras = forwarding.extras(call.extras, metadata)
    return call if extras is call.extras else attrs.evolve(call, extras=extras)


def decode_request(request: v2.ModelInferRequest, limits: DecodeLimits) -> DecodedRequest:
    """What ``request`` asks (ModelInfer and ModelStreamInfer alike); errors name the field."""
    name, version = request.model_name, request.model_version
    spec = cached_spec((name, version), lambda: _spec(name, version))
    signature = _signature_name(request) if request.parameters else None
    requested: list[str] | None = None
    if request.outputs:
        for output in request.outputs:
            if "classification" in output.parameters:
                raise UnimplementedError(
                    f"Output '{output.name}': the classification extension is not supported"
                )
        requested = [output.name for output in request.outputs]
    extras = (
        RequestExtras.of_request(request.id, _parameter_values(request.parameters))
        if request.id or request.parameters
        else NO_EXTRAS
    )
    return DecodedRequest(spec, signature, decode_inputs(request, limits), requested, extras)


def _parameter_values(
    parameters: Mapping[str, v2.InferParameter],
) -> dict[str, bool | int | float | str]:
    values: dict[str, bool | int | float | str] = {}
    for key, parameter in parameters.items():
        which = parameter.WhichOneof("parameter_choice")
        if which is not None:
            values[key] = getattr(parameter, which)
    return values


def encode_response(
    request: v2.ModelInferRequest,
    call: DecodedRequest,
    model_name: str,
    version: int,
    outputs: dict[str, npt.NDArray[Any]],
) -> v2.ModelInferResponse:
    """The response to ``request``: its id, the version that served it, the requested outputs."""
    if call.requested:
        outputs = {name: outputs[name] for name in dict.fromkeys(call.requested)}
    response = v2.ModelInferResponse(
        model_name=model_name, model_version=str(version), id=request.id
    )
    encode_outputs(outputs, response)
    return response


def set_parameters(
    response: v2.ModelInferResponse, parameters: Mapping[str, bool | int | float | str]
) -> None:
    """Sets ``parameters`` (a model's response parameters) on ``response``."""
    for name, value in parameters.items():
        parameter = response.parameters[name]
        if isinstance(value, bool):
            parameter.bool_param = value
        elif isinstance(value, int):
            parameter.int64_param = value
        elif isinstance(value, float):
            parameter.double_param = value
        else:
            parameter.string_param = value


def _set_duration(message: v2.StatisticDuration, duration: StatisticDuration) -> None:
    message.count = duration.count
    message.ns = duration.ns


def _name(name: str) -> str:
    if not name:
        raise InvalidArgumentError("The request names no model")
    return name


def _version(name: str, text: str) -> int | None:
    if not text:
        return None
    if not (text.isascii() and text.isdigit()):  # "²".isdigit(), but int("²") fails
        raise InvalidArgumentError(f"Model {name}: version {text!r} is not a non-negative integer")
    return int(text)


def _spec(name: str, version: str) -> ModelSpec:
    name = _name(name)
    return ModelSpec(name, _version(name, version))


def _signature_name(request: v2.ModelInferRequest) -> str | None:
    if SIGNATURE_PARAMETER not in request.parameters:
        return None
    parameter = request.parameters[SIGNATURE_PARAMETER]
    if parameter.WhichOneof("parameter_choice") != "string_param":
        raise InvalidArgumentError(f"The {SIGNATURE_PARAMETER} parameter must be a string")
    return parameter.string_param or None
