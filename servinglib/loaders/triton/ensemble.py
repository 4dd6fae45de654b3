"""The "ensemble" platform: a Triton ensemble served as one signature running its steps.

An ensemble's version directory holds nothing; its ``config.pbtxt`` (beside the versions)
describes the steps, checked at load against the step models' ``config.pbtxt`` s in the same
repository (:mod:`~servinglib.loaders.triton.ensemble_graph`).  Each request runs the steps
as their tensors become ready, those whose tensors are ready together concurrently, each a
call of its model through the server's request path (:func:`~servinglib.model_calls.model_caller`:
the model's own batching, instances, statistics and the request's deadline), the arrays
handed from step to step as they are.

An ensemble whose steps run one after another (a chain: never two ready together) and whose
step models all answer a call on the calling thread (Python or ensemble-free models with no
dynamic or sequence batching and no decoupled responses, by their ``config.pbtxt``) runs as a
``thread`` call: the whole chain on one thread, each step called there, with no hand-over
between threads per step.  Any other ensemble runs on the event loop, its steps as tasks, so
that concurrent branches overlap and a batching step fills its batches from every request
waiting on it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Any, final

import numpy.typing as npt

from servinglib.core.loader import Loader
from servinglib.errors import InternalError, InvalidArgumentError, ServingError
from servinglib.loaders.model_loader import ModelLoader
from servinglib.loaders.triton.config import (
    CONFIG_FILE_NAME,
    TritonModelConfig,
    execution_mode,
    instance_count,
    read_model_config,
    tensor_specs,
)
from servinglib.loaders.triton.ensemble_graph import (
    EnsembleGraph,
    Step,
    StepSpecs,
    ensemble_graph,
)
from servinglib.model_calls import ModelCaller, model_caller
from servinglib.servable import (
    DEFAULT_SIGNATURE,
    ExecutionMode,
    Servable,
    SignatureSpec,
    Tensors,
)
from servinglib.sources.source import StoragePath
from servinglib.sources.source_adapter import FunctionSourceAdapter, SourceAdapter
from servinglib.sources.version_check import VersionCheck

_Outputs = dict[str, npt.NDArray[Any]]


def make_adapter(config: object = None) -> SourceAdapter[StoragePath, Loader]:
    """The "ensemble" platform's adapter: each version directory as an :class:`EnsembleLoader`."""
    del config  # the platform has no options
    return FunctionSourceAdapter(EnsembleLoader)


def version_check(config: object = None) -> VersionCheck:
    """An ensemble's version directory is complete as it is: Triton's are empty."""
    del config
    return _complete


def _complete(path: str) -> str | None:
    del path
    return None


@final
class EnsembleLoader(ModelLoader):
    """Loads one version of an ensemble: its config read and checked (no code runs).

    The load fails with InvalidArgumentError naming the fault (see
    :func:`~servinglib.loaders.triton.ensemble_graph.ensemble_graph`).
    Thread safety: as any Loader (one thread at a time).
    """

    def _load_servable(self) -> Servable:
        model_dir = os.path.dirname(os.path.abspath(self.path))
        config = read_model_config(model_dir)
        steps = _StepConfigs(os.path.dirname(model_dir))
        graph = ensemble_graph(config, steps.specs)
        names = [s.model_name for s in graph.steps]
        # Steps that all run inline run on the event loop with the ensemble, no thread at all.
        on_loop = all(steps.runs_inline(n) for n in names)
        in_turn = _one_at_a_time(graph) and all(steps.answers_in_place(n) for n in names)
        mode = ExecutionMode.THREAD if in_turn and not on_loop else ExecutionMode.ASYNC
        return EnsembleServable(graph, mode)


@final
class EnsembleServable(Servable):
    """An ensemble's one signature, ``serving_default``: its steps as a DAG, run as
    ``mode`` says (ASYNC: on the event loop, ready steps concurrently; THREAD: on one
    thread, in order).

    A step that fails fails the request with its error's code, naming the step and its
    model; the steps still running are cancelled.  Thread-safe: holds only its graph.
    """

    def __init__(self, graph: EnsembleGraph, mode: ExecutionMode = ExecutionMode.ASYNC) -> None:
        self._graph = graph
        spec = SignatureSpec(graph.inputs, graph.outputs, execution_mode=mode)
        self._signatures = {DEFAULT_SIGNATURE: spec}

    @property
    def signatures(self) -> Mapping[str, SignatureSpec]:
        return self._signatures

    @property
    def graph(self) -> EnsembleGraph:
        """The checked steps."""
        return self._graph

    def call(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> _Outputs:
        """The steps one after another, on this thread (for a caller with no event loop)."""
        caller = model_caller()
        tensors = dict(inputs)
        for step in self._graph.steps:
            try:
                outputs = caller.call(*_step_call(step, tensors), **_step_options(step))
            except Exception as error:
                raise self._step_failed(step, error) from error
            tensors.update(_written(step, outputs))
        return _answer(self._graph, tensors, output_filter)

    async def call_async(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> _Outputs:
        caller = model_caller()
        tensors = dict(inputs)
        waiting = list(self._graph.steps)
        running: dict[asyncio.Task[_Outputs], Step] = {}
        try:
            while True:
                ready = [s for s in waiting if all(t in tensors for t in s.reads.values())]
                for step in ready:
                    waiting.remove(step)
                if len(ready) == 1 and not running:
                    # A step alone (each of a chain's) is awaited here: no task, no wait.
                    tensors.update(await self._run_alone(caller, ready[0], tensors))
                    continue
                for step in ready:
                    running[asyncio.ensure_future(_run_step(caller, step, tensors))] = step
                if not running:
                    break
                done, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
                for task in done:
                    step = running.pop(task)
                    try:
                        outputs = task.result()
                    except Exception as error:
                        raise self._step_failed(step, error) from error
                    tensors.update(_written(step, outputs))
        finally:
            for task in running:
                task.cancel()
            if running:
                await asyncio.gather(*running, return_exceptions=True)
        return _answer(self._graph, tensors, output_filter)

    async def _run_alone(
        self, caller: ModelCaller, step: Step, tensors: Mapping[str, Any]
    ) -> dict[str, Any]:
        try:
            outputs = await _run_step(caller, step, tensors)
        except Exception as error:
            raise self._step_failed(step, error) from error
        return _written(step, outputs)

    def _step_failed(self, step: Step, error: Exception) -> ServingError:
        code = error.code if isinstance(error, ServingError) else InternalError.code
        text = (
            error.message if isinstance(error, ServingError) else f"{type(error).__name__}: {error}"
        )
        return ServingError.from_code(code, f"Ensemble {self._graph.name}: {step} failed: {text}")


async def _run_step(caller: ModelCaller, step: Step, tensors: Mapping[str, Any]) -> _Outputs:
    return await caller.call_async(*_step_call(step, tensors), **_step_options(step))


def _step_call(step: Step, tensors: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    return step.model_name, {model_input: tensors[t] for model_input, t in step.reads.items()}


def _step_options(step: Step) -> dict[str, Any]:
    return {"version": step.version, "output_filter": tuple(step.writes)}


def _written(step: Step, outputs: Mapping[str, Any]) -> dict[str, Any]:
    return {tensor: outputs[model_output] for model_output, tensor in step.writes.items()}


def _answer(
    graph: EnsembleGraph, tensors: Mapping[str, Any], output_filter: frozenset[str] | None
) -> _Outputs:
    wanted = output_filter if output_filter is not None else [s.name for s in graph.outputs]
    return {name: tensors[name] for name in wanted}


def _one_at_a_time(graph: EnsembleGraph) -> bool:
    """True when no two of ``graph``'s steps are ever ready together (a chain)."""
    made = {spec.name for spec in graph.inputs}
    waiting = list(graph.steps)
    while waiting:
        ready = [s for s in waiting if all(t in made for t in s.reads.values())]
        if len(ready) != 1:
            return False
        waiting.remove(ready[0])
        made.update(ready[0].writes.values())
    return True


@final
class _StepConfigs:
    """The step models' ``config.pbtxt`` s in ``repository``, each read once (at the load)."""

    def __init__(self, repository: str) -> None:
        self._repository = repository
        self._read: dict[str, TritonModelConfig | None] = {}

    def specs(self, name: str) -> StepSpecs | None:
        """A step model's tensors (none listed: empty); None when the repository has no
        model ``name``."""
        if not name or name in {".", ".."} or "/" in name or "\0" in name:
            return None
        directory = os.path.join(self._repository, name)
        if not os.path.isdir(directory):
            return None
        config = self._config(name)
        if config is None:
            return {}, {}
        inputs, outputs = tensor_specs(config)
        return {s.name: s for s in inputs}, {s.name: s for s in outputs}

    def answers_in_place(self, name: str) -> bool:
        """True when model ``name``'s config says a call of it is answered on the calling
        thread: a Python model with neither dynamic nor sequence batching nor decoupled
        responses (unknown, without a config: False)."""
        config = self._config(name)
        if config is None:
            return False
        message = config.message
        return (
            (message.backend == "python" or message.platform == "python")
            and not message.HasField("dynamic_batching")
            and not message.HasField("sequence_batching")
            and not message.model_transaction_policy.decoupled
        )

    def runs_inline(self, name: str) -> bool:
        """True when model ``name`` answers in place and its config runs it inline
        (``EXECUTION_MODE``: see :func:`~servinglib.loaders.triton.config.execution_mode`)."""
        config = self._config(name)
        if config is None or not self.answers_in_place(name):
            return False
        try:
            if instance_count(config) > 1:
                return False  # (instances are model processes: a call waits for one)
            return execution_mode(config) is ExecutionMode.INLINE
        except InvalidArgumentError:
            return False  # (the step model's own load fails, naming it)

    def _config(self, name: str) -> TritonModelConfig | None:
        if name not in self._read:
            directory = os.path.join(self._repository, name)
            has = os.path.isfile(os.path.join(directory, CONFIG_FILE_NAME))
            self._read[name] = read_model_config(directory) if has else None
        return self._read[name]
