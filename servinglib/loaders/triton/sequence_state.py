"""Implicit state of a Triton sequence model: tensors the server keeps per sequence.

``sequence_batching.state [ { input_name, output_name, data_type, dims, initial_state } ]``:
each request of a sequence gets its sequence's state as the input ``input_name``; the
model's response gives the next state as the output ``output_name``, which the server keeps
(and does not send to the client) for the sequence's next request.  A sequence starts with
the initial state: zeros, or ``initial_state`` (``zero_data``, or ``data_file``: raw values
in ``<model>/initial_state/<file>``, strings each as a 4-byte little-endian length and its
bytes, as Triton reads them); its state is dropped when it ends.  With ``max_batch_size`` > 0
a state tensor has a batch dimension of 1 before its ``dims``.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Mapping
from typing import Any, final

import attrs
import numpy as np
import numpy.typing as npt

from servinglib.errors import InternalError, InvalidArgumentError
from servinglib.loaders.triton.config import TritonModelConfig, numpy_dtype
from servinglib.servable import Tensors

INITIAL_STATE_DIR = "initial_state"
"""The directory of the model's ``initial_state`` data files, in the model's directory."""


@final
@attrs.frozen
class _State:
    input_name: str
    output_name: str
    initial: npt.NDArray[Any]


@final
class SequenceStates:
    """The state tensors a model's config asks for (none: an empty set).

    Immutable after construction, so thread-safe.
    """

    def __init__(self, config: TritonModelConfig, model_dir: str) -> None:
        """Reads ``config``'s ``state`` list and the initial values.

        Raises InvalidArgumentError, naming the model and the state, for a state with a
        variable dimension and no initial state giving its shape, a data file that is not
        in the model's ``initial_state`` directory or does not hold the values its dims
        say, and more than one ``initial_state``.
        """
        message = config.message
        batch = (1,) if message.max_batch_size > 0 else ()
        self._states = tuple(
            _State(
                state.input_name,
                state.output_name,
                _initial(message.name, state, model_dir).reshape(batch + _dims(state)),
            )
            for state in message.sequence_batching.state
        )
        self.output_names = frozenset(state.output_name for state in self._states)
        """The outputs that are the next state (the client does not get them)."""

    def inputs(self, state: Tensors | None) -> Tensors:
        """The state inputs of a request: ``state``, or the initial state if None."""
        if state is not None:
            return state
        return {s.input_name: s.initial.copy() for s in self._states}

    def split(
        self, outputs: Mapping[str, npt.NDArray[Any]], asked: frozenset[str] | None
    ) -> tuple[dict[str, npt.NDArray[Any]], Tensors]:
        """``outputs`` as the client's (those ``asked``, None: all but the state's) and the
        sequence's next state, by input name.

        Raises InternalError naming an output state the model's response lacks.
        """
        missing = [s.output_name for s in self._states if s.output_name not in outputs]
        if missing:
            raise InternalError(f"The model's response has no output state '{missing[0]}'")
        state = {s.input_name: outputs[s.output_name] for s in self._states}
        if asked is None:
            asked = frozenset(outputs) - self.output_names
        return {name: value for name, value in outputs.items() if name in asked}, state


def _dims(state: Any) -> tuple[int, ...]:  # noqa: ANN401 - a State message
    if state.initial_state:
        return tuple(state.initial_state[0].dims)
    return tuple(state.dims)


def _initial(model: str, state: Any, model_dir: str) -> npt.NDArray[Any]:  # noqa: ANN401 - a State message
    what = f"Model {model!r}: state {state.input_name!r}"
    if len(state.initial_state) > 1:
        raise InvalidArgumentError(
            f"{what} has {len(state.initial_state)} initial_state; one at most"
        )
    initial = state.initial_state[0] if state.initial_state else None
    dims = _dims(state)
    if any(d < 0 for d in dims):
        raise InvalidArgumentError(
            f"{what} has a variable dimension {list(dims)}: give its shape in initial_state.dims"
        )
    dtype = numpy_dtype(initial.data_type if initial is not None else state.data_type)
    count = int(np.prod(dims, dtype=np.int64))
    if initial is None or initial.WhichOneof("state_data") != "data_file":
        fill: object = b"" if dtype == np.object_ else 0
        return np.full(dims, fill, dtype=dtype)
    return _read_data_file(what, model_dir, initial.data_file, dtype, count).reshape(dims)


def _read_data_file(
    what: str, model_dir: str, name: str, dtype: np.dtype[Any], count: int
) -> npt.NDArray[Any]:
    directory = os.path.realpath(os.path.join(model_dir, INITIAL_STATE_DIR))
    path = os.path.realpath(os.path.join(directory, name))
    if not path.startswith(directory + os.sep):
        raise InvalidArgumentError(f"{what}: data_file {name!r:.80} is not in {INITIAL_STATE_DIR}/")
    try:
        with open(path, "rb") as file:
            data = file.read()
    except OSError as exc:
        raise InvalidArgumentError(f"{what}: cannot read data_file {path}: {exc.strerror}") from exc
    if dtype != np.object_:
        if len(data) != count * dtype.itemsize:
            raise InvalidArgumentError(
                f"{what}: data_file {path} holds {len(data)} bytes, not the {count} "
                f"{dtype.name} values ({count * dtype.itemsize} bytes) its dims say"
            )
        return np.frombuffer(data, dtype=dtype.newbyteorder("<")).astype(dtype)
    items: list[bytes] = []
    offset = 0
    while offset + 4 <= len(data) and len(items) < count:
        (size,) = struct.unpack_from("<I", data, offset)
        items.append(data[offset + 4 : offset + 4 + size])
        offset += 4 + size
    if len(items) != count or offset != len(data):
        raise InvalidArgumentError(
            f"{what}: data_file {path} does not hold the {count} strings its dims say"
        )
    return np.array(items, dtype=object)
