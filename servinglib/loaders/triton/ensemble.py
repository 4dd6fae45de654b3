"""The "ensemble" platform: a Triton ensemble served as one signature running its steps.

An ensemble's version directory holds nothing; its ``config.pbtxt`` (beside the versions)
describes the steps, checked at load against the step models' ``config.pbtxt`` s in the same
repository (:mod:`~servinglib.loaders.triton.ensemble_graph`).  Each request runs the steps
as their tensors become ready, those whose tensors are ready together concurrently, each a
call of its model through the server's request path (:func:`~servinglib.model_calls.model_caller`:
the model's own batching, instances, statistics and the request's deadline), the arrays
handed from step to step as they are.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from typing import Any, final

import numpy.typing as npt

from servinglib.core.loader import Loader
from servinglib.errors import InternalError, ServingError
from servinglib.loaders.model_loader import ModelLoader
from servinglib.loaders.triton.config import (
    CONFIG_FILE_NAME,
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
        repository = os.path.dirname(model_dir)
        return EnsembleServable(ensemble_graph(config, lambda name: _step_specs(repository, name)))


@final
class EnsembleServable(Servable):
    """An ensemble's one signature, ``serving_default`` (ASYNC): its steps as a DAG.

    A step that fails fails the request with its error's code, naming the step and its
    model; the steps still running are cancelled.  Thread-safe: holds only its graph.
    """

    def __init__(self, graph: EnsembleGraph) -> None:
        self._graph = graph
        spec = SignatureSpec(graph.inputs, graph.outputs, execution_mode=ExecutionMode.ASYNC)
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


def _step_specs(repository: str, name: str) -> StepSpecs | None:
    """A step model's tensors from its ``config.pbtxt`` in ``repository`` (none listed: empty);
    None when the repository has no model ``name``."""
    if not name or name in {".", ".."} or "/" in name or "\0" in name:
        return None
    directory = os.path.join(repository, name)
    if not os.path.isdir(directory):
        return None
    if not os.path.isfile(os.path.join(directory, CONFIG_FILE_NAME)):
        return {}, {}
    inputs, outputs = tensor_specs(read_model_config(directory))
    return {s.name: s for s in inputs}, {s.name: s for s in outputs}
