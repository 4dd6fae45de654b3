"""Small translations shared by the servicers: model specs, deadlines, tensors by name."""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from typing import Any, Final

import numpy.typing as npt

from servinglib.codecs.limits import DEFAULT_LIMITS, DecodeLimits, FillBudget
from servinglib.codecs.tensor import to_numpy
from servinglib.errors import InvalidArgumentError
from servinglib.protos import model_pb2, tensor_pb2
from servinglib.server.grpc._rpc import Context
from servinglib.server.model_spec import ModelSpec

MAX_CACHED_SPECS: Final = 1024
"""How many ModelSpecs :func:`cached_spec` keeps before it starts over."""

_specs: dict[Hashable, ModelSpec] = {}


def cached_spec(key: Hashable, make: Callable[[], ModelSpec]) -> ModelSpec:
    """The ModelSpec ``make()`` builds for the request fields ``key``, built once per key.

    ``key`` must hold every field ``make`` reads.  Errors ``make`` raises are
    not kept.  At :data:`MAX_CACHED_SPECS` keys the cache is emptied, so ever
    new names cannot grow it.  Process-wide: an entry is an immutable, pure
    function of its key.  Thread-safe: each dict operation is atomic.
    """
    spec = _specs.get(key)
    if spec is None:
        spec = make()
        if len(_specs) >= MAX_CACHED_SPECS:
            _specs.clear()
        _specs[key] = spec
    return spec


def model_spec_of(proto: model_pb2.ModelSpec, has_spec: bool = True) -> ModelSpec:
    """The ModelSpec a request's ``model_spec`` names (version, label, or latest).

    Raises InvalidArgumentError for a missing spec or name, a negative version,
    or a name or label the server cannot hold.
    """
    if not has_spec:
        raise InvalidArgumentError("Missing ModelSpec")
    choice = proto.WhichOneof("version_choice")
    if choice == "version":
        selector: int | str | None = proto.version.value
    elif choice == "version_label":
        selector = proto.version_label
    else:
        selector = None
    key = (proto.name, choice, selector, proto.signature_name)
    return cached_spec(key, lambda: _model_spec_of(proto, choice))


def _model_spec_of(proto: model_pb2.ModelSpec, choice: str | None) -> ModelSpec:
    if not proto.name:
        raise InvalidArgumentError("Missing model name in request.")
    try:
        if choice == "version":
            return ModelSpec(proto.name, proto.version.value, signature_name=proto.signature_name)
        if choice == "version_label":
            return ModelSpec(
                proto.name,
                version_label=proto.version_label,
                signature_name=proto.signature_name,
            )
        return ModelSpec(proto.name, signature_name=proto.signature_name)
    except ValueError as error:
        raise InvalidArgumentError(f"Invalid ModelSpec for model {proto.name!r}: {error}") from None


def fill_model_spec(
    proto: model_pb2.ModelSpec, name: str, version: int, signature_name: str | None = None
) -> None:
    """Writes which model, version (and signature) served a request, as TF Serving does."""
    proto.name = name
    proto.version.value = version
    if signature_name is not None:
        proto.signature_name = signature_name


_NO_DEADLINE_S = 1e9  # ~32 years: grpcio's synchronous server says ~9.2e18 s for "none"


def deadline_of(context: Context) -> float | None:
    """The client's deadline as ``time.monotonic()`` seconds, or None without one.

    grpc.aio says None without a deadline, grpcio's synchronous server an
    infinite future: both are None here.
    """
    remaining = context.time_remaining()
    if remaining is None or remaining > _NO_DEADLINE_S:
        return None
    return time.monotonic() + remaining


def tensors_of(
    protos: Any,  # noqa: ANN401 - a protobuf map
    limits: DecodeLimits = DEFAULT_LIMITS,
) -> dict[str, npt.NDArray[Any]]:
    """A map of TensorProto by name as numpy arrays; errors name the tensor.

    The fills of all the tensors share one budget of ``limits``, tied to the
    tensors' size on the wire (worked out only if a tensor needs a fill).
    """
    budget = None  # one tensor: to_numpy's budget of that tensor alone is the request's
    if len(protos) > 1:
        budget = limits.fill_budget(lambda: sum(proto.ByteSize() for proto in protos.values()))
    tensors: dict[str, npt.NDArray[Any]] = {}
    for name, proto in protos.items():
        tensors[name] = tensor_of(name, proto, limits, budget)
    return tensors


def tensor_of(
    name: str,
    proto: tensor_pb2.TensorProto,
    limits: DecodeLimits = DEFAULT_LIMITS,
    fill_budget: FillBudget | None = None,
) -> npt.NDArray[Any]:
    """``proto`` as a numpy array; InvalidArgumentError naming the tensor if malformed."""
    try:
        return to_numpy(proto, limits=limits, fill_budget=fill_budget)
    except InvalidArgumentError as error:
        raise InvalidArgumentError(f"Input tensor '{name}': {error.message}") from None
