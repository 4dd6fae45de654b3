"""Tests for ServableHarness: a Loader in a real manager, stepped by hand, called via signatures."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from servinglib.batching import BatchingParameters
from servinglib.core.basic_manager import ManagerOptions
from servinglib.core.loader_harness import LoadRetryOptions
from servinglib.core.servable_id import ServableId
from servinglib.core.servable_state import ManagerState
from servinglib.core.simple_loader import SimpleLoader
from servinglib.errors import (
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    UnavailableError,
)
from servinglib.loaders.python import PythonLoader
from servinglib.testing import FakeClock, FakeLoader, ServableHarness, make_version_dirs, wait_until

NO_RETRIES = LoadRetryOptions(max_num_load_retries=0)
START, LOADING, AVAILABLE, UNLOADING, END = (
    ManagerState.START,
    ManagerState.LOADING,
    ManagerState.AVAILABLE,
    ManagerState.UNLOADING,
    ManagerState.END,
)

MODEL_PY = """
import asyncio
import numpy as np
from servinglib.loaders import PythonModel, signature
from servinglib.servable import ExecutionMode, TensorSpec

X = [TensorSpec("x", "float32", [-1])]
Y = [TensorSpec("y", "float32", [-1])]

class Model(PythonModel):
    @signature(name="serving_default", inputs=X, outputs=Y)
    def double(self, x):
        return {"y": x * 2}

    @signature(name="later", inputs=X, outputs=Y, execution_mode=ExecutionMode.ASYNC)
    async def later(self, x):
        await asyncio.sleep(0)
        return {"y": x + 1}

    @signature(name="parts", inputs=X, outputs=Y)
    def parts(self, x):
        for value in x:
            yield {"y": np.array([value], np.float32)}

    @signature(name="parts_async", inputs=X, outputs=Y, execution_mode=ExecutionMode.ASYNC)
    async def parts_async(self, x):
        for value in x:
            yield {"y": np.array([-value], np.float32)}
"""


@pytest.fixture
def version_dir(tmp_path: Path) -> Path:
    return make_version_dirs(tmp_path, "doubler", [1], {"model.py": MODEL_PY}) / "1"


def x(*values: float) -> dict[str, np.ndarray]:
    return {"x": np.array(values, np.float32)}


def test_serves_a_python_model_and_calls_it_as_front_ends_do(version_dir: Path) -> None:
    """Entering loads the version; call() runs signatures by name, ASYNC ones included."""
    with ServableHarness(lambda: PythonLoader(str(version_dir)), name="doubler") as harness:
        assert harness.call(None, x(1.0, 2.0))["y"].tolist() == [2.0, 4.0]
        assert harness.call("later", x(1.0))["y"].tolist() == [2.0]
        assert harness.states == [START, LOADING, AVAILABLE]
        assert harness.servable_id == ServableId("doubler", 1)

    assert harness.states == [START, LOADING, AVAILABLE, UNLOADING, END]


def test_call_raises_what_a_request_would_get(version_dir: Path) -> None:
    """Unknown signatures, misfit inputs and unknown outputs get call_signature's errors."""
    with ServableHarness(PythonLoader(str(version_dir))) as harness:
        with pytest.raises(FailedPreconditionError, match='"nope" not found'):
            harness.call("nope", x(1.0))
        with pytest.raises(InvalidArgumentError, match="has dtype float64"):
            harness.call(None, {"x": np.array([1.0])})
        with pytest.raises(InvalidArgumentError, match="Unknown output tensor 'z'"):
            harness.call(None, x(1.0), output_filter=["z"])


def test_a_failed_load_on_enter_raises_with_the_load_error_as_cause() -> None:
    """Entering raises AssertionError naming the servable; its cause is the load's error."""
    failing = FakeLoader(load_error=NotFoundError("no weights"))

    with (
        pytest.raises(AssertionError, match=r"did not become AVAILABLE") as raised,
        ServableHarness(failing, options=ManagerOptions(load_retry=NO_RETRIES)),
    ):
        pass

    assert isinstance(raised.value.__cause__, NotFoundError)


def test_load_returns_the_final_state_without_raising() -> None:
    """With load_on_enter=False, load() returns END with the error as health."""
    failing = FakeLoader(load_error=NotFoundError("no weights"))
    options = ManagerOptions(load_retry=NO_RETRIES)
    with ServableHarness(failing, options=options, load_on_enter=False) as harness:
        assert harness.state is None

        state = harness.load()

        assert state.manager_state is END
        assert isinstance(state.health, NotFoundError)
        assert harness.states == [START, LOADING, END]
        with pytest.raises((NotFoundError, UnavailableError)):
            harness.call(None, x(1.0))


def test_unload_then_load_again_uses_a_new_loader_from_the_factory() -> None:
    """unload() ends the version; load() again serves a fresh loader's servable."""
    made: list[FakeLoader] = []

    def factory() -> FakeLoader:
        made.append(FakeLoader(f"servable {len(made) + 1}"))
        return made[-1]

    with ServableHarness(factory) as harness:
        assert harness.unload().manager_state is END
        assert harness.load().manager_state is AVAILABLE
        assert harness.load().manager_state is AVAILABLE  # already available: no-op
        with harness.handle() as handle:
            assert handle.servable == "servable 2"

    assert [loader.unload_calls for loader in made] == [1, 1]
    assert harness.states == [START, LOADING, AVAILABLE, UNLOADING, END] * 2


def test_call_on_a_servable_that_is_not_a_servable_is_a_type_error() -> None:
    """A plain object cannot be called through signatures: TypeError says to use handle()."""
    with ServableHarness(SimpleLoader(dict)) as harness:
        with pytest.raises(TypeError, match="is a dict, not a servinglib Servable"):
            harness.call(None, x(1.0))
        with harness.handle() as handle:
            assert handle.servable == {}


def test_retries_on_a_fake_clock_are_stepped_by_hand() -> None:
    """aspire, run_once and clock.advance drive a retried load deterministically."""
    clock = FakeClock()
    loader = FakeLoader("ok", load_errors=[UnavailableError("not yet")])
    options = ManagerOptions(load_retry=LoadRetryOptions(3, 30.0))
    with ServableHarness(loader, options=options, clock=clock, load_on_enter=False) as harness:
        harness.aspire()
        harness.run_once()  # attempt 1 fails; the retry waits 30 s on the clock
        assert clock.pending_timers == 1
        assert harness.states == [START, LOADING]

        clock.advance(30.0)  # attempt 2 runs here and succeeds

        assert harness.states == [START, LOADING, AVAILABLE]
        assert loader.load_calls == 2


def test_loads_on_a_load_thread_are_waited_for() -> None:
    """With load threads, load() steps and waits until the pool finishes the load."""
    options = ManagerOptions(num_load_threads=1)
    with ServableHarness(FakeLoader("pooled", load_delay_s=0.01), options=options) as harness:
        assert harness.state is not None
        assert harness.state.manager_state is AVAILABLE


def test_a_load_that_never_settles_times_out_with_its_states() -> None:
    """A load stuck past timeout_s raises TimeoutError naming the servable and its states."""
    gate = threading.Event()
    options = ManagerOptions(num_load_threads=1)
    harness = ServableHarness(
        FakeLoader(load_gate=gate), options=options, timeout_s=0.05, load_on_enter=False
    )
    try:
        with pytest.raises(TimeoutError) as raised:
            harness.load()
    finally:
        gate.set()
        harness.close()

    assert str(raised.value) == (
        "servable {name: model version: 1} did not reach AVAILABLE or END within 0.05 s; "
        "its states so far: START, LOADING"
    )


def test_batching_serves_the_version_through_batch_queues(version_dir: Path) -> None:
    """With batching, concurrent calls share model calls and each gets its own rows back."""
    params = BatchingParameters(max_batch_size=16, batch_timeout_s=0.05, num_batch_threads=1)
    with ServableHarness(PythonLoader(str(version_dir)), batching=params) as harness:
        results = harness.call_concurrently(None, [x(float(i)) for i in range(16)])
        assert [r["y"].tolist() for r in results] == [[2.0 * i] for i in range(16)]
        assert harness.call("later", x(1.0))["y"].tolist() == [2.0]  # async: not batched
        scheduler = harness.batch_scheduler
        assert scheduler is not None
        # A batch's totals are recorded after its requests complete: wait for the last one's.
        queue = "model/1/serving_default"
        wait_until(lambda: scheduler.statistics()[queue].rows_run >= 16)
        stats = scheduler.statistics()[queue]
        assert stats.rows_run == 16
        assert stats.batches_run < 16
    assert scheduler.statistics() == {}


def test_call_concurrently_without_batching_runs_each_call(version_dir: Path) -> None:
    """Without batching, concurrent calls each run the signature on their own thread."""
    with ServableHarness(PythonLoader(str(version_dir))) as harness:
        assert harness.batch_scheduler is None
        results = harness.call_concurrently(None, [x(1.0), x(2.0)])
        assert [r["y"].tolist() for r in results] == [[2.0], [4.0]]


def test_call_stream_reads_every_part_of_a_streaming_signature(version_dir: Path) -> None:
    """call_stream gives a generator's parts in order, for THREAD and ASYNC signatures alike."""
    with ServableHarness(PythonLoader(str(version_dir))) as harness:
        parts = harness.call_stream("parts", x(1, 2))
        async_parts = harness.call_stream("parts_async", x(1, 2))
        with pytest.raises(InvalidArgumentError):
            harness.call_stream("parts", {"z": np.zeros(1, np.float32)})

    assert [p["y"].tolist() for p in parts] == [[1.0], [2.0]]
    assert [p["y"].tolist() for p in async_parts] == [[-1.0], [-2.0]]
