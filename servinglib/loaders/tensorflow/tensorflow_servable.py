"""TensorFlowServable: a loaded SavedModel's signatures, called with numpy in and out."""

from __future__ import annotations

import types
from collections.abc import Mapping
from typing import Any, NamedTuple, final

import numpy as np
import numpy.typing as npt

from servinglib.errors import FailedPreconditionError, InvalidArgumentError
from servinglib.loaders.tensorflow._errors import call_error
from servinglib.loaders.tensorflow._runtime import tensorflow
from servinglib.servable import Servable, SignatureSpec, Tensors


@final
class TensorFlowServable(Servable):
    """The signatures of a ``tf.saved_model.load`` result, as a Servable.

    Inputs and outputs are numpy arrays (strings as object arrays of bytes).
    Errors TF raises while running are reported with TF's status code and
    message: an op rejecting its input is INVALID_ARGUMENT.
    Thread-safe: TF runs concurrent calls of one function.
    """

    def __init__(self, model: Any, signatures: Mapping[str, SignatureSpec]) -> None:  # noqa: ANN401 - a tf.saved_model.load result
        """Binds each of ``signatures`` to ``model.signatures[name]``.

        Raises InvalidArgumentError when the loaded functions disagree with
        the specs (a signature, input or output the other side lacks).
        """
        tf = tensorflow()
        self._model = model
        self._signatures: Mapping[str, SignatureSpec] = types.MappingProxyType(dict(signatures))
        self._functions: dict[str, _BoundSignature] = {
            name: _bind(model, name, spec) for name, spec in signatures.items()
        }
        self._to_tensor = tf.constant

    @property
    def signatures(self) -> Mapping[str, SignatureSpec]:
        return self._signatures

    @property
    def model(self) -> Any:  # noqa: ANN401 - a tf.saved_model.load result
        """The object ``tf.saved_model.load`` returned; FailedPreconditionError once unloaded."""
        if self._model is None:
            raise FailedPreconditionError("The SavedModel has been unloaded")
        return self._model

    def call(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> dict[str, npt.NDArray[Any]]:
        # The request path: every statement here costs each request (see bench/loaders_call.py).
        bound = self._functions.get(signature_name)
        if bound is None:
            raise FailedPreconditionError(
                f"Signature '{signature_name}' cannot run: the SavedModel has been unloaded"
            )
        function, call_flat, flat_order, output_names = bound
        to_tensor = self._to_tensor
        try:
            if call_flat is not None:
                flat = [to_tensor(inputs[name]) for name in flat_order]
            else:
                tensors = {name: to_tensor(value) for name, value in inputs.items()}
        except Exception as exc:
            raise _conversion_error(inputs, flat_order, to_tensor) from exc
        try:
            if call_flat is not None:
                results = call_flat(flat, function.captured_inputs)
            else:
                results = function(**tensors)
        except Exception as exc:
            raise call_error(exc, signature_name) from exc
        names = output_names if output_filter is None else output_filter
        return {name: _to_numpy(results[name]) for name in names}

    def release(self) -> None:
        """Drops every reference to the model, so it can be freed; later calls fail.

        Called by the loader on unload.  Requires: no call is running (a
        manager unloads a version only once every handle to it is released).
        Calls after it raise FailedPreconditionError.
        """
        self._functions = {}
        self._model = None


class _BoundSignature(NamedTuple):
    """A signature's concrete function, and how the request path calls it."""

    function: Any
    call_flat: Any  # None: call through the function's public keyword interface
    flat_order: tuple[str, ...]  # input names in the order call_flat takes their tensors
    output_names: tuple[str, ...]


def _bind(model: Any, name: str, spec: SignatureSpec) -> _BoundSignature:  # noqa: ANN401 - a tf.saved_model.load result
    function = model.signatures.get(name)
    if function is None:
        raise InvalidArgumentError(f"The loaded SavedModel has no function for signature '{name}'")
    _, kwargs = function.structured_input_signature
    _check_keys(name, "inputs", set(kwargs), set(spec.inputs))
    outputs = function.structured_outputs
    if isinstance(outputs, Mapping):
        _check_keys(name, "outputs", set(outputs), set(spec.outputs))
    flat = _flat_call(function, spec)
    if flat is None:
        return _BoundSignature(function, None, tuple(spec.inputs), tuple(spec.outputs))
    call_flat, order = flat
    return _BoundSignature(function, call_flat, order, tuple(spec.outputs))


def _flat_call(function: Any, spec: SignatureSpec) -> tuple[Any, tuple[str, ...]] | None:  # noqa: ANN401 - a ConcreteFunction
    """The function's flat entry point and its input order, when its inputs allow it.

    ``_call_flat`` skips the keyword binding and casts of ``function(**tensors)``
    (~20 µs a call, which call_signature's checks make redundant).  It is
    TF-internal, so it is used only when every parameter is a dense TensorSpec
    passable by keyword and named after a signature input; else the public call.
    """
    call_flat = getattr(function, "_call_flat", None)
    function_type = getattr(function, "function_type", None)
    parameters = getattr(function_type, "parameters", None)
    if call_flat is None or not isinstance(parameters, Mapping):
        return None
    tensor_spec = tensorflow().TensorSpec
    order = tuple(parameters)
    if set(order) != set(spec.inputs) or len(order) != len(spec.inputs):
        return None
    for parameter in parameters.values():
        if (
            parameter.kind not in (parameter.KEYWORD_ONLY, parameter.POSITIONAL_OR_KEYWORD)
            or type(parameter.type_constraint) is not tensor_spec
        ):
            return None
    if len(function.inputs) != len(order) + len(function.captured_inputs):
        return None
    return call_flat, order


def _check_keys(name: str, kind: str, loaded: set[str], declared: set[str]) -> None:
    if loaded != declared:
        raise InvalidArgumentError(
            f"Signature '{name}' declares {kind} {sorted(declared)}, but its loaded function "
            f"has {sorted(loaded)}"
        )


def _to_numpy(tensor: Any) -> npt.NDArray[Any]:  # noqa: ANN401 - a tf.Tensor
    value = tensor.numpy()
    if type(value) is np.ndarray:
        return value
    # Scalars come back as numpy scalars (or bytes, for strings): keep the 0-d array contract.
    return np.asarray(value, dtype=object if isinstance(value, bytes) else None)


def _conversion_error(
    inputs: Tensors,
    names: tuple[str, ...],
    to_tensor: Any,  # noqa: ANN401 - tf.constant
) -> InvalidArgumentError:
    missing = sorted(set(names) - set(inputs))
    if missing:
        return InvalidArgumentError(f"Missing input tensor '{missing[0]}'")
    for name, value in inputs.items():
        try:
            to_tensor(value)
        except Exception as exc:  # noqa: BLE001 - reported as the request's error
            return InvalidArgumentError(
                f"Input tensor '{name}' cannot be converted to a TensorFlow tensor: {exc}"
            )
    return InvalidArgumentError("The inputs cannot be converted to TensorFlow tensors")
