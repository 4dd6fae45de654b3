"""An ensemble's steps as a checked DAG of tensors: what each step needs and what it makes.

An ensemble's ``config.pbtxt`` (``platform: "ensemble"``) names its steps in
``ensemble_scheduling``; each step maps the step model's inputs from, and its outputs to,
tensors of the ensemble (``input_map``: the step model's input → the ensemble's tensor,
``output_map``: the step model's output → the ensemble's tensor).  :func:`ensemble_graph`
checks it against the step models' own configs, as Triton does at the ensemble's load, and
refuses with one line naming the fault: a missing step model, a tensor no one makes or made
twice, a step model's tensor it does not have, a type or shape that differs between the
tensor's maker and its user, an ensemble output no step makes, and a cycle.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, final

import attrs
import numpy as np

from servinglib.errors import InvalidArgumentError
from servinglib.loaders.triton.config import TritonModelConfig, tensor_specs
from servinglib.protos import model_config_pb2 as pb
from servinglib.servable import TensorSpec

StepSpecs = tuple[Mapping[str, TensorSpec], Mapping[str, TensorSpec]]
"""A step model's inputs and outputs by name (empty both: its config lists none)."""
StepLookup = Callable[[str], StepSpecs | None]
"""A step model's tensors by its name, or None: no such model."""


@final
@attrs.frozen
class Step:
    """One step: its index, the model (``version`` None: the one it serves; a number: that
    one), what it reads (its model's input → the ensemble's tensor) and what it writes (its
    model's output → the ensemble's tensor).  Immutable, so thread-safe."""

    index: int
    model_name: str
    version: int | None
    reads: Mapping[str, str]
    writes: Mapping[str, str]

    def __str__(self) -> str:
        return f"step {self.index} (model {self.model_name})"


@final
@attrs.frozen
class EnsembleGraph:
    """A checked ensemble: its name, inputs and outputs (specs), and its steps in an order
    where each step's tensors are made before it (a topological order).
    Immutable, so thread-safe."""

    name: str
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    steps: tuple[Step, ...]


def step_models(message: pb.ModelConfig) -> tuple[tuple[str, int | None], ...]:
    """The models (and versions: None follows the model's) an ensemble's steps call, once each."""
    seen = {
        (step.model_name, None if step.model_version < 0 else step.model_version): None
        for step in message.ensemble_scheduling.step
    }
    return tuple(seen)


def ensemble_graph(config: TritonModelConfig, lookup: StepLookup) -> EnsembleGraph:
    """The ensemble ``config`` describes, checked against its step models' tensors.

    Raises InvalidArgumentError naming the ensemble and the fault (see the module).
    """
    message = config.message
    name = message.name
    inputs, outputs = tensor_specs(config)

    def refuse(fault: str) -> InvalidArgumentError:
        return InvalidArgumentError(f"Ensemble {name}: {fault}")

    if not message.ensemble_scheduling.step:
        raise refuse("ensemble_scheduling names no step")
    made: dict[str, tuple[str, TensorSpec | None]] = {s.name: ("its input", s) for s in inputs}
    steps = []
    for index, entry in enumerate(message.ensemble_scheduling.step):
        version = None if entry.model_version < 0 else entry.model_version
        step = Step(index, entry.model_name, version, dict(entry.input_map), dict(entry.output_map))
        specs = lookup(step.model_name)
        if specs is None:
            raise refuse(f"{step} names a model that is not in the repository")
        _check_step_tensors(step, specs, refuse)
        for model_output, tensor in step.writes.items():
            if tensor in made:
                raise refuse(f"tensor {tensor} is made twice: by {made[tensor][0]} and {step}")
            made[tensor] = (str(step), specs[1].get(model_output))
        steps.append(step)
    for step in steps:
        specs = lookup(step.model_name) or ({}, {})
        for model_input, tensor in step.reads.items():
            if tensor not in made:
                raise refuse(f"{step} reads tensor {tensor}, which no step and no input makes")
            _check_same(tensor, made[tensor], (str(step), specs[0].get(model_input)), refuse)
    for spec in outputs:
        if spec.name not in made:
            raise refuse(f"output {spec.name} is made by no step")
        _check_same(spec.name, made[spec.name], ("its output", spec), refuse)
    return EnsembleGraph(name, inputs, outputs, _ordered(steps, refuse))


def _check_step_tensors(
    step: Step, specs: StepSpecs, refuse: Callable[[str], InvalidArgumentError]
) -> None:
    model_inputs, model_outputs = specs
    if not model_inputs and not model_outputs:
        return  # the step model's config lists no tensors: checked when it is called
    for model_input in step.reads:
        if model_input not in model_inputs:
            raise refuse(f"{step} maps input {model_input}, which its model does not have")
    for model_input in model_inputs:
        if model_input not in step.reads:
            raise refuse(f"{step} leaves its model's input {model_input} unmapped")
    for model_output in step.writes:
        if model_output not in model_outputs:
            raise refuse(f"{step} maps output {model_output}, which its model does not have")


def _check_same(
    tensor: str,
    maker: tuple[str, TensorSpec | None],
    user: tuple[str, TensorSpec | None],
    refuse: Callable[[str], InvalidArgumentError],
) -> None:
    (made_by, made), (used_by, used) = maker, user
    if made is None or used is None:
        return
    if made.dtype != used.dtype:
        raise refuse(
            f"tensor {tensor} is {_type(made.dtype)} from {made_by} but {used_by} takes "
            f"{_type(used.dtype)}"
        )
    if not _shapes_fit(made.shape, used.shape):
        raise refuse(
            f"tensor {tensor} has shape {list(made.shape or [])} from {made_by} but {used_by} "
            f"takes {list(used.shape or [])}"
        )


def _shapes_fit(made: tuple[int, ...] | None, used: tuple[int, ...] | None) -> bool:
    if made is None or used is None:
        return True
    if len(made) != len(used):
        return False
    return all(a == b or -1 in (a, b) for a, b in zip(made, used, strict=True))


def _type(dtype: np.dtype[Any]) -> str:
    return "BYTES" if dtype == np.dtype(object) else str(dtype)


def _ordered(steps: list[Step], refuse: Callable[[str], InvalidArgumentError]) -> tuple[Step, ...]:
    """``steps`` in an order that makes each tensor before it is read; refuses a cycle."""
    maker = {tensor: step for step in steps for tensor in step.writes.values()}
    done: list[Step] = []
    state: dict[int, str] = {}  # "visiting" or "done", by step index

    def visit(step: Step, path: tuple[Step, ...]) -> None:
        if state.get(step.index) == "done":
            return
        if state.get(step.index) == "visiting":
            cycle = [*path[path.index(step) :], step]
            raise refuse("its steps form a cycle: " + " -> ".join(str(s) for s in cycle))
        state[step.index] = "visiting"
        for tensor in step.reads.values():
            before = maker.get(tensor)
            if before is not None:
                visit(before, (*path, step))
        state[step.index] = "done"
        done.append(step)

    for step in steps:
        visit(step, ())
    return tuple(done)
