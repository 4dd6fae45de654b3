"""The control inputs of a Triton sequence model: START, END, READY and CORRID per request.

``sequence_batching.control_input`` names input tensors the server fills in for each request
it hands the model: ``CONTROL_SEQUENCE_START`` / ``_END`` (the request starts / ends its
sequence), ``_READY`` (the slot holds a request: always true, as servinglib passes no empty
slots) in their ``int32_false_true``, ``fp32_false_true`` or ``bool_false_true`` form, and
``CONTROL_SEQUENCE_CORRID``, the sequence id, as its ``data_type`` (``TYPE_UINT64``,
``TYPE_INT64``, ``TYPE_UINT32``, ``TYPE_INT32`` or ``TYPE_STRING``; a string id is valid
only for ``TYPE_STRING``, a number is sent as its decimal text there).  Each tensor has one
element, shaped ``[1]``, or ``[1, 1]`` with a batch dimension (``max_batch_size`` > 0).
"""

from __future__ import annotations

from typing import Any, final

import attrs
import numpy as np
import numpy.typing as npt

from servinglib.errors import InvalidArgumentError
from servinglib.loaders.triton.config import TritonModelConfig
from servinglib.protos import model_config_pb2 as pb

_Control = pb.ModelSequenceBatching.Control
_START: int = _Control.CONTROL_SEQUENCE_START
_END: int = _Control.CONTROL_SEQUENCE_END
_CORRID_TYPES: dict[int, type[np.generic]] = {
    pb.TYPE_UINT64: np.uint64,
    pb.TYPE_INT64: np.int64,
    pb.TYPE_UINT32: np.uint32,
    pb.TYPE_INT32: np.int32,
    pb.TYPE_STRING: np.object_,
}


@final
@attrs.frozen
class _ControlInput:
    """One control tensor: its name, kind, and its false and true values (None: CORRID)."""

    name: str
    kind: int
    dtype: np.dtype[Any]
    false_true: tuple[Any, Any] | None
    bounds: tuple[int, int] | None = None  # a numeric CORRID's range


@final
class SequenceControls:
    """The control tensors a model's config asks for, made for each request.

    Immutable after construction, so thread-safe.
    """

    def __init__(self, config: TritonModelConfig) -> None:
        """Reads ``config``'s ``control_input`` list.

        Raises InvalidArgumentError, naming the model and the input, for a control without a
        kind's values (two: false, true) or a CORRID of a type other than those listed.
        """
        message = config.message
        self._model = message.name
        self._shape = (1, 1) if message.max_batch_size > 0 else (1,)
        self._inputs = tuple(
            _control_input(message.name, entry.name, control)
            for entry in message.sequence_batching.control_input
            for control in entry.control
        )

    @property
    def names(self) -> frozenset[str]:
        """The control inputs' names (the client does not send them)."""
        return frozenset(control.name for control in self._inputs)

    def tensors(
        self, correlation_id: int | str, *, start: bool, end: bool
    ) -> dict[str, npt.NDArray[Any]]:
        """The control tensors of a request of sequence ``correlation_id``.

        Raises InvalidArgumentError for a string id when the CORRID control is numeric.
        """
        tensors = {}
        for control in self._inputs:  # (a sequence's flags change, so each call makes them)
            if control.false_true is None:
                value: object = self._corrid(control, correlation_id)
            else:
                flag = {_START: start, _END: end}.get(control.kind, True)  # READY: always
                value = control.false_true[int(flag)]
            tensors[control.name] = np.full(self._shape, value, dtype=control.dtype)
        return tensors

    def check_id(self, correlation_id: int | str) -> None:
        """Raises, as :meth:`tensors` would, unless ``correlation_id`` fits the CORRID control."""
        for control in self._inputs:
            if control.false_true is None:
                self._corrid(control, correlation_id)

    def _corrid(self, control: _ControlInput, correlation_id: int | str) -> object:
        if control.bounds is None:  # a string CORRID
            return str(correlation_id).encode("utf-8")
        if isinstance(correlation_id, str):
            raise InvalidArgumentError(
                f"Sequence {correlation_id!r:.80}: model '{self._model}' takes numeric sequence "
                f"ids (its control input {control.name} is {control.dtype.name}), not a string"
            )
        low, high = control.bounds
        if not low <= correlation_id <= high:
            raise InvalidArgumentError(
                f"Sequence {correlation_id}: model '{self._model}' takes sequence ids that fit "
                f"in {control.dtype.name} (its control input {control.name})"
            )
        return correlation_id


def _control_input(model: str, name: str, control: Any) -> _ControlInput:  # noqa: ANN401 - a Control message
    if control.kind == _Control.CONTROL_SEQUENCE_CORRID:
        scalar = _CORRID_TYPES.get(control.data_type)
        if scalar is None:
            raise InvalidArgumentError(
                f"Model {model!r}: control input {name!r} (CONTROL_SEQUENCE_CORRID) must be of "
                "TYPE_UINT64, TYPE_INT64, TYPE_UINT32, TYPE_INT32 or TYPE_STRING, not "
                f"{pb.DataType.Name(control.data_type)}"
            )
        dtype = np.dtype(scalar)
        if dtype == np.object_:
            return _ControlInput(name, control.kind, dtype, None)
        info = np.iinfo(dtype)
        return _ControlInput(name, control.kind, dtype, None, (int(info.min), int(info.max)))
    forms = [
        (values, np.dtype(dtype))
        for values, dtype in (
            (control.int32_false_true, np.int32),
            (control.fp32_false_true, np.float32),
            (control.bool_false_true, np.bool_),
        )
        if values
    ]
    if len(forms) != 1 or len(forms[0][0]) != 2:
        raise InvalidArgumentError(
            f"Model {model!r}: control input {name!r} ({_Control.Kind.Name(control.kind)}) "
            "needs one of int32_false_true, fp32_false_true, bool_false_true with two values"
        )
    values, dtype = forms[0]
    return _ControlInput(name, control.kind, dtype, (values[0], values[1]))
