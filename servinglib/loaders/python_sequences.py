"""A PythonModel's stateful signature: each sequence's steps in order, its state kept by the server.

A signature declared with ``@signature(..., sequences=Sequences())`` is served as Triton serves
a model with ``sequence_batching`` (the direct strategy), without Triton's API: each request
names its sequence (the V2 request parameters ``sequence_id``, ``sequence_start``,
``sequence_end``, as ``tritonclient`` sends them), a sequence holds a slot until its END (or
until it is idle for ``max_sequence_idle_s``), its steps run one at a time in arrival order,
and the method gets, beside the request's tensors, the ``state`` the sequence's previous step
returned (None at its START) and the ``start`` and ``end`` flags; it returns the step's outputs
and the sequence's next state, any Python object, kept in the server's process until END::

    @signature(inputs=[TensorSpec("x", "int32", [1])], outputs=[TensorSpec("total", "int32", [1])],
               sequences=Sequences(slots=64))
    def accumulate(self, x, *, state, start, end):
        total = x if state is None else state + x
        return {"total": total}, total

The steps are placed by the same :class:`~servinglib.loaders.triton.sequence_batcher.
SequenceBatcher` as a Triton model's: the errors, the backlog and the idle ending are Triton's.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Mapping
from collections.abc import Sequence as Seq
from typing import Any, final

import attrs
import numpy.typing as npt

from servinglib.errors import InternalError, ServingError
from servinglib.loaders.triton.sequence_batcher import SequenceBatcher, SequenceStep, StepResult
from servinglib.loaders.triton.sequence_options import SequenceOptions, Strategy
from servinglib.request_extras import request_extras_scope
from servinglib.servable import Tensors

Outputs = dict[str, npt.NDArray[Any]]


@final
@attrs.frozen
class Sequences:
    """How a stateful signature's sequences are served (see the module).

    ``slots``: sequences served at once (more wait in a backlog, bounded by ``max_backlog``
    when not 0: beyond it, UNAVAILABLE); ``max_sequence_idle_s``: a sequence with no
    request for so long is ended (its next request without START is refused);
    ``concurrency``: threads running the steps of different sequences at once (each with
    ``slots / concurrency`` of the slots).  Immutable, so thread-safe.
    """

    slots: int = attrs.field(default=64, validator=attrs.validators.ge(1))
    max_sequence_idle_s: float = attrs.field(default=60.0, validator=attrs.validators.gt(0))
    max_backlog: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    concurrency: int = attrs.field(default=1, validator=attrs.validators.ge(1))

    def options(self) -> SequenceOptions:
        """The sequence batcher's options: the direct strategy over ``concurrency`` threads."""
        per_thread = math.ceil(self.slots / self.concurrency)
        return SequenceOptions(
            strategy=Strategy.DIRECT,
            slots=per_thread,
            max_batch_size=per_thread,
            instances=self.concurrency,
            max_sequence_idle_s=self.max_sequence_idle_s,
            max_backlog=self.max_backlog,
        )


@final
class StatefulSignature:
    """One stateful signature of a PythonModel: its method behind a sequence batcher (its
    placement).  Thread-safe: each sequence's steps run one at a time."""

    def __init__(
        self,
        name: str,
        method: Callable[..., Any],
        sequences: Sequences,
        outputs: Callable[[object, frozenset[str] | None], Outputs],
        *,
        model_name: str,
    ) -> None:
        """``outputs(returned, output_filter)`` checks and converts what the method returned."""
        self._name = name
        self._method = method
        self._outputs = outputs
        self.batcher = SequenceBatcher(self, sequences.options(), model_name=model_name)

    def check(self, inputs: Tensors, correlation_id: int | str) -> None:
        """Any sequence id (a number or a string) is one: nothing to refuse here."""

    def execute_steps(
        self, instance: int, steps: Seq[SequenceStep]
    ) -> list[StepResult | ServingError]:
        """Runs each step (one per sequence) in turn, with its request's extras current."""
        return [self._step(step) for step in steps]

    def _step(self, step: SequenceStep) -> StepResult | ServingError:
        try:
            with request_extras_scope(step.extras):
                returned = self._method(
                    **step.inputs, state=step.state, start=step.start, end=step.end
                )
        except Exception as exc:  # noqa: BLE001 - the step's failure is its answer
            return ServingError.wrap(exc, f"Signature '{self._name}' failed")
        if not (isinstance(returned, tuple) and len(returned) == 2):
            return InternalError(
                f"Signature '{self._name}' is stateful: it returns (outputs, next state), "
                f"not {type(returned).__name__}"
            )
        outputs, state = returned
        try:
            return StepResult(self._outputs(outputs, step.wanted), state)
        except ServingError as error:
            return error

    def close(self) -> None:
        """Stops the batcher's threads once the queued steps have run."""
        self.batcher.close()


def stateful_signatures(
    methods: Mapping[str, Callable[..., Any]],
    sequences: Mapping[str, Sequences],
    outputs: Callable[[str, object, frozenset[str] | None], Outputs],
    model_name: str,
) -> dict[str, StatefulSignature]:
    """The stateful signatures among ``methods`` (those ``sequences`` names)."""
    return {
        name: StatefulSignature(
            name,
            methods[name],
            options,
            functools.partial(outputs, name),
            model_name=model_name,
        )
        for name, options in sequences.items()
    }
