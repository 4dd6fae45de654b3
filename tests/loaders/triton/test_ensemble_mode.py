"""Where an ensemble runs: a chain of in-place steps on one thread, anything else on the loop."""

from __future__ import annotations

from pathlib import Path

import pytest

from servinglib.loaders.triton.ensemble import EnsembleLoader
from servinglib.servable import DEFAULT_SIGNATURE, ExecutionMode
from tests.triton.pipeline_models import (
    UNARY_CONFIG,
    chain_config,
    unary,
    write,
    write_pipeline_repository,
)

CHAIN = chain_config(("pre", -1, "IN", "OUT"), ("step", -1, "IN", "OUT"))


def _mode(repository: Path, ensemble: str) -> ExecutionMode:
    loader = EnsembleLoader(str(repository / ensemble / "1"))
    loader.load()
    try:
        return loader.servable().signatures[DEFAULT_SIGNATURE].execution_mode
    finally:
        loader.unload()


def test_a_chain_of_python_steps_runs_on_one_thread(tmp_path: Path) -> None:
    """pre → double → post: every step is answered in place, one after another."""
    repository = write_pipeline_repository(tmp_path / "models", tmp_path / "rendezvous")
    assert _mode(repository, "pipeline") is ExecutionMode.THREAD


def test_an_ensemble_with_concurrent_branches_runs_on_the_event_loop(tmp_path: Path) -> None:
    """The diamond's two branches are ready together: they run as concurrent tasks."""
    repository = write_pipeline_repository(tmp_path / "models", tmp_path / "rendezvous")
    assert _mode(repository, "diamond") is ExecutionMode.ASYNC


@pytest.mark.parametrize(
    "step_config",
    [
        UNARY_CONFIG.format(extra="dynamic_batching { }"),
        UNARY_CONFIG.format(extra="sequence_batching { }"),
        UNARY_CONFIG.format(extra="model_transaction_policy { decoupled: true }"),
        None,  # no config.pbtxt: what the model does is unknown
    ],
    ids=["dynamic-batching", "sequence-batching", "decoupled", "no-config"],
)
def test_a_chain_with_a_step_that_waits_for_others_runs_on_the_event_loop(
    tmp_path: Path, step_config: str | None
) -> None:
    """A batching step fills its batches from every request waiting on it: those waits must
    not each hold a thread of the pool, so the ensemble stays on the event loop."""
    repository = tmp_path / "models"
    unary(repository, "pre", "x + 1")
    if step_config is None:
        (repository / "step" / "1").mkdir(parents=True)
    else:
        write(repository, "step", step_config)
    write(repository, "ensemble", CHAIN)
    assert _mode(repository, "ensemble") is ExecutionMode.ASYNC


INLINE = 'parameters { key: "EXECUTION_MODE" value: { string_value: "inline" } }'


def test_a_chain_of_inline_steps_runs_on_the_event_loop_with_them(tmp_path: Path) -> None:
    """Steps that run inline need no thread: the ensemble awaits them on the loop."""
    repository = tmp_path / "models"
    for name in ("pre", "step"):
        write(repository, name, UNARY_CONFIG.format(extra=INLINE))
    write(repository, "ensemble", CHAIN)
    assert _mode(repository, "ensemble") is ExecutionMode.ASYNC


def test_a_chain_with_one_step_in_a_thread_runs_on_one_thread(tmp_path: Path) -> None:
    repository = tmp_path / "models"
    write(repository, "pre", UNARY_CONFIG.format(extra=INLINE))
    unary(repository, "step", "x * 2")
    write(repository, "ensemble", CHAIN)
    assert _mode(repository, "ensemble") is ExecutionMode.THREAD
