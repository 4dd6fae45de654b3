"""A Triton Python model with ``sequence_batching``: its instances behind a sequence batcher.

:class:`TritonSequenceServable` serves the signature of N instances of the model (each its
own ``TritonPythonModel``, in the server's process) through one
:class:`~servinglib.loaders.triton.sequence_batcher.SequenceBatcher`: a sequence sticks to
the instance whose slot it holds, and each request reaches ``execute`` with its control
inputs filled in (:mod:`~servinglib.loaders.triton.sequence_controls`) and its sequence's
implicit state (:mod:`~servinglib.loaders.triton.sequence_state`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from collections.abc import Sequence as Seq
from typing import Any, Protocol, final, runtime_checkable

import numpy.typing as npt

from servinglib.errors import InvalidArgumentError, ServingError
from servinglib.loaders.triton.config import TritonModelConfig, check_batch_size
from servinglib.loaders.triton.sequence_batcher import SequenceBatcher, SequenceStep, StepResult
from servinglib.loaders.triton.sequence_controls import SequenceControls
from servinglib.loaders.triton.sequence_options import sequence_options
from servinglib.loaders.triton.sequence_state import SequenceStates
from servinglib.request_extras import RequestExtras
from servinglib.servable import (
    CallSite,
    CallStages,
    ModelCall,
    Placement,
    Servable,
    SignatureSpec,
    Tensors,
    request_deadline,
)


@runtime_checkable
class _Mortal(Protocol):
    """An instance that may die alone (a model process), saying so."""

    def on_exit(self, callback: Callable[[ServingError], None]) -> None: ...


class SequenceInstance(Protocol):
    """One instance of a sequence model: a TritonPythonServable in this process, or a
    ProcessServable whose process serves one."""

    @property
    def signatures(self) -> Mapping[str, SignatureSpec]: ...

    def pending_request(
        self,
        inputs: Tensors,
        output_filter: frozenset[str] | None,
        extras: RequestExtras,
        deadline: float | None,
        *,
        also_wanted: frozenset[str] = frozenset(),
    ) -> Any: ...  # noqa: ANN401 - the instance's own request record

    def execute_requests(
        self, requests: Seq[Any]
    ) -> list[dict[str, npt.NDArray[Any]] | ServingError]: ...

    def close(self) -> None: ...


@final
class TritonSequenceServable(Servable):
    """The signature ``serving_default`` of ``instances``, each call placed by the sequence
    batcher; :meth:`call` (embedding code) goes through it too.  :meth:`close` stops the
    batcher, then finalizes every instance.  Thread-safe.
    """

    def __init__(
        self,
        instances: Seq[SequenceInstance],
        config: TritonModelConfig,
        model_dir: str,
        version: int,
    ) -> None:
        """Serves ``instances`` of the model in ``model_dir`` as ``config`` says.

        Raises InvalidArgumentError as :func:`sequence_options` and :class:`SequenceControls`
        do, and when ``config`` sets no ``sequence_batching``.
        """
        options = sequence_options(config, len(instances))
        if options is None:
            raise InvalidArgumentError(f"Model {config.message.name!r} sets no sequence_batching")
        self._instances = tuple(instances)
        self._version = version
        self._name = config.message.name
        states = SequenceStates(config, model_dir)
        self._executor = _Executor(self._instances, config, SequenceControls(config), states)
        self._batcher = SequenceBatcher(self._executor, options, model_name=self._name)
        for index, instance in enumerate(self._instances):
            if isinstance(instance, _Mortal):  # a model process: its sequences die with it
                instance.on_exit(functools.partial(self._batcher.end_instance, index))

    @property
    def instances(self) -> Seq[SequenceInstance]:
        """The model's instances, in order."""
        return self._instances

    @property
    def batcher(self) -> SequenceBatcher:
        """The placement of the model's calls."""
        return self._batcher

    def sequence_gauge(self) -> tuple[int, int, int]:
        """(sequences holding a slot, sequences waiting for one, slots): what the metrics
        show (``servinglib.server.plane.sequence_gauges``)."""
        statistics = self._batcher.statistics()
        return statistics.active - statistics.backlog, statistics.backlog, statistics.slots

    @property
    def signatures(self) -> Mapping[str, SignatureSpec]:
        return self._instances[0].signatures

    def call(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> dict[str, npt.NDArray[Any]]:
        site = CallSite(self._name, self._version, signature_name)
        spec = self.signatures[signature_name]
        call = ModelCall(
            site, self, spec, inputs, output_filter, request_deadline(), CallStages(), _nothing
        )
        return self._batcher.run_blocking(call)

    def placement(self, signature_name: str) -> Placement | None:
        return self._batcher

    def batches_itself(self, signature_name: str) -> bool:
        return True

    def close(self) -> None:
        self._batcher.close()
        for instance in self._instances:
            instance.close()


def _nothing() -> None:
    """A call made by :meth:`TritonSequenceServable.call` holds its version already."""


@final
class _Executor:
    """Runs sequence steps on an instance: the client's tensors, the control tensors and the
    sequence's state in; the client's outputs and the next state out.  Thread-safe (each
    instance serializes its execute)."""

    def __init__(
        self,
        instances: Seq[SequenceInstance],
        config: TritonModelConfig,
        controls: SequenceControls,
        states: SequenceStates,
    ) -> None:
        self._instances = instances
        self._message = config.message
        self._controls = controls
        self._states = states

    def check(self, inputs: Tensors, correlation_id: int | str) -> None:
        check_batch_size(self._message, inputs)
        self._controls.check_id(correlation_id)

    def execute_steps(
        self, instance: int, steps: Seq[SequenceStep]
    ) -> list[StepResult | ServingError]:
        servable = self._instances[instance]
        pending = [
            servable.pending_request(
                {
                    **step.inputs,
                    **self._controls.tensors(
                        step.extras.correlation_id, start=step.start, end=step.end
                    ),
                    **self._states.inputs(step.state),
                },
                step.wanted,
                step.extras,
                step.deadline,
                also_wanted=self._states.output_names,
            )
            for step in steps
        ]
        outcomes = servable.execute_requests(pending)
        return [
            outcome if isinstance(outcome, ServingError) else self._result(outcome, step.wanted)
            for outcome, step in zip(outcomes, steps, strict=True)
        ]

    def _result(
        self, outputs: dict[str, npt.NDArray[Any]], wanted: frozenset[str] | None
    ) -> StepResult | ServingError:
        if not self._states.output_names:
            return StepResult(outputs)
        try:
            client_outputs, state = self._states.split(outputs, wanted)
        except ServingError as error:
            return error
        return StepResult(client_outputs, state)
