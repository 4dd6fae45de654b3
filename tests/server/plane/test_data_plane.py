"""DataPlane: execution modes run where they should; deadlines bound calls; handles outlive them."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import attrs
import numpy as np
import pytest

from servinglib.errors import (
    DeadlineExceededError,
    FailedPreconditionError,
    NotFoundError,
    UnavailableError,
)
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.model_spec import ModelSpec
from servinglib.server.observe.request_context import begin_request, end_request
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.server_core import ServerCore
from servinglib.testing import wait_until, write_python_model
from servinglib.testing.plugin import TEST_SERVER_CORE_OPTIONS

MODEL_PY = """
import asyncio
import threading
import time
from pathlib import Path
import numpy as np
from servinglib.loaders import PythonModel, signature
from servinglib.servable import ExecutionMode, TensorSpec, request_deadline

X = [TensorSpec("x", "float32", [-1])]
Y = [TensorSpec("y", "float32", [-1]), TensorSpec("thread", "int64", [])]

class Model(PythonModel):
    def load(self, path):
        self.go = Path(path) / "GO"

    @signature(name="serving_default", inputs=X, outputs=Y)
    def pooled(self, x):
        return {"y": x + 1, "thread": threading.get_ident()}

    @signature(inputs=X, outputs=Y, execution_mode=ExecutionMode.INLINE)
    def inline(self, x):
        return {"y": x + 2, "thread": threading.get_ident()}

    @signature(inputs=X, outputs=Y, execution_mode=ExecutionMode.ASYNC)
    async def coroutine(self, x):
        await asyncio.sleep(0)
        deadline = request_deadline()
        return {"y": x + (0 if deadline is None else 3), "thread": threading.get_ident()}

    @signature(inputs=X, outputs=Y)
    def gated(self, x):
        deadline = time.monotonic() + 30
        while not self.go.exists() and time.monotonic() < deadline:
            time.sleep(0.005)
        return {"y": x, "thread": threading.get_ident()}

    @signature(inputs=X, outputs=Y, execution_mode=ExecutionMode.ASYNC)
    async def never(self, x):
        await asyncio.Event().wait()
"""

X = {"x": np.array([1.0], np.float32)}
SPEC = ModelSpec.latest("m")


def write_model(root: Path) -> ModelServerConfig:
    return ModelServerConfig([ModelConfig.python("m", write_python_model(root, "m", MODEL_PY))])


def release_gated_calls(root: Path) -> None:
    (root / "m" / "1" / "GO").write_text("")


@pytest.fixture
def core(tmp_path: Path) -> Iterator[ServerCore]:
    with ServerCore(write_model(tmp_path), TEST_SERVER_CORE_OPTIONS) as core:
        yield core


@pytest.fixture
def plane(core: ServerCore) -> Iterator[DataPlane]:
    plane = DataPlane(core, max_workers=2)
    yield plane
    plane.close()


def test_thread_mode_runs_on_the_pool_and_inline_on_the_loop(plane: DataPlane) -> None:
    """THREAD signatures run off the event loop's thread, INLINE ones on it."""

    async def run() -> tuple[int, int, int]:
        pooled = await plane.infer(SPEC, None, X)
        inline = await plane.infer(SPEC, "inline", X)
        assert pooled.outputs["y"].tolist() == [2.0]
        assert inline.outputs["y"].tolist() == [3.0]
        return int(pooled.outputs["thread"]), int(inline.outputs["thread"]), threading.get_ident()

    pooled_thread, inline_thread, loop_thread = asyncio.run(run())
    assert pooled_thread != loop_thread
    assert inline_thread == loop_thread


def test_async_mode_sees_the_deadline(plane: DataPlane) -> None:
    """ASYNC signatures are awaited on the loop, with the request's deadline in context."""
    result = asyncio.run(plane.infer(SPEC, "coroutine", X, deadline=time.monotonic() + 30))
    assert result.outputs["y"].tolist() == [4.0]
    assert (result.model_name, result.version, result.signature_name) == ("m", 1, "coroutine")


def test_output_filter_and_unknown_signature(plane: DataPlane) -> None:
    """The output filter narrows the outputs; an unknown signature is FAILED_PRECONDITION."""
    result = asyncio.run(plane.infer(SPEC, None, X, ["y"]))
    assert set(result.outputs) == {"y"}
    with pytest.raises(FailedPreconditionError, match="nope"):
        asyncio.run(plane.infer(SPEC, "nope", X))


def test_unknown_model_is_not_found(plane: DataPlane) -> None:
    """A model the core does not serve is NOT_FOUND."""
    with pytest.raises(NotFoundError):
        asyncio.run(plane.infer(ModelSpec.latest("other"), None, X))


def test_async_deadline(plane: DataPlane) -> None:
    """An ASYNC call that never ends fails with DEADLINE_EXCEEDED at its deadline."""
    with pytest.raises(DeadlineExceededError):
        asyncio.run(plane.infer(SPEC, "never", X, deadline=time.monotonic() + 0.05))


def test_a_deadline_already_past_fails_at_once(plane: DataPlane) -> None:
    """A request whose deadline has passed is not run."""
    with pytest.raises(DeadlineExceededError):
        asyncio.run(plane.infer(SPEC, "coroutine", X, deadline=time.monotonic() - 1))


def test_in_flight_bound_counts_calls_until_they_end(tmp_path: Path) -> None:
    """A call past its deadline fails at once but holds its in-flight slot until it ends."""
    options = attrs.evolve(TEST_SERVER_CORE_OPTIONS, max_requests_in_flight_per_model=1)
    with ServerCore(write_model(tmp_path), options) as core:
        plane = DataPlane(core, max_workers=2)
        try:
            with pytest.raises(DeadlineExceededError):
                asyncio.run(plane.infer(SPEC, "gated", X, deadline=time.monotonic() + 0.05))
            with pytest.raises(UnavailableError, match="in flight"):
                asyncio.run(plane.infer(SPEC, None, X))
            release_gated_calls(tmp_path)
            wait_until(lambda: _served(plane), timeout_s=10)
        finally:
            plane.close()


def test_a_queued_call_past_its_deadline_is_dropped_and_frees_its_slot(tmp_path: Path) -> None:
    """A THREAD call still queued at its deadline fails, and its in-flight slot comes back then."""
    options = attrs.evolve(TEST_SERVER_CORE_OPTIONS, max_requests_in_flight_per_model=2)
    with ServerCore(write_model(tmp_path), options) as core:
        plane = DataPlane(core, max_workers=1)

        async def run() -> None:
            gated = asyncio.create_task(plane.infer(SPEC, "gated", X))
            await asyncio.sleep(0)  # the one worker takes the gated call
            for _ in range(2):  # the second is admitted: the first gave its slot back
                with pytest.raises(DeadlineExceededError):
                    await plane.infer(SPEC, None, X, deadline=time.monotonic() + 0.05)
            release_gated_calls(tmp_path)
            await gated

        try:
            asyncio.run(run())
            assert _served(plane)
        finally:
            plane.close()


def test_a_thread_call_past_its_deadline_is_never_queued(tmp_path: Path) -> None:
    """A THREAD call whose deadline has passed fails at once and holds no in-flight slot."""
    options = attrs.evolve(TEST_SERVER_CORE_OPTIONS, max_requests_in_flight_per_model=1)
    with ServerCore(write_model(tmp_path), options) as core:
        plane = DataPlane(core, max_workers=1)
        try:
            with pytest.raises(DeadlineExceededError):
                asyncio.run(plane.infer(SPEC, "gated", X, deadline=time.monotonic() - 1))
            assert _served(plane)  # the gated call never ran: its slot is free
        finally:
            plane.close()


def test_a_thread_call_within_its_deadline_answers(plane: DataPlane) -> None:
    """A THREAD call that ends before its deadline returns its outputs (the timer is dropped)."""

    async def run() -> list[int]:
        results = []
        for _ in range(3):
            result = await plane.infer(SPEC, None, X, deadline=time.monotonic() + 30)
            results.append(int(result.outputs["y"][0]))
        return results

    assert asyncio.run(run()) == [2, 2, 2]  # x + 1


def _served(plane: DataPlane) -> bool:
    try:
        asyncio.run(plane.infer(SPEC, None, X))
    except UnavailableError:
        return False
    return True


def test_a_closed_plane_refuses_calls(core: ServerCore) -> None:
    """After close(), a call for the worker pool fails at once instead of waiting forever."""
    plane = DataPlane(core)
    asyncio.run(plane.infer(SPEC, None, X))  # a worker starts, then idles
    plane.close()
    with pytest.raises(RuntimeError, match="closed"):
        asyncio.run(asyncio.wait_for(plane.infer(SPEC, None, X), 30))


def test_requests_in_flight_are_counted_while_they_run(tmp_path: Path) -> None:
    """A running inference counts as in flight for its model until it returns, then not at all."""
    with ServerCore(write_model(tmp_path), TEST_SERVER_CORE_OPTIONS) as core:
        plane = DataPlane(core, max_workers=2)
        try:

            async def run() -> None:
                call = asyncio.ensure_future(plane.infer(SPEC, "gated", X))
                await asyncio.to_thread(
                    wait_until, lambda: plane.requests_in_flight() == {"m": 1}, timeout_s=10
                )
                release_gated_calls(tmp_path)
                await call

            asyncio.run(run())
            assert plane.requests_in_flight() == {}
        finally:
            plane.close()


def test_a_call_on_a_server_thread_that_ends_past_its_deadline_fails_and_is_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """On a server thread the call cannot be cut off; ending past its deadline, it fails as
    DEADLINE_EXCEEDED (the client has gone) and logs the line every timed-out call logs, with
    the request's id."""
    with ServerCore(write_model(tmp_path), TEST_SERVER_CORE_OPTIONS) as core:
        plane = DataPlane(core, max_workers=1)
        try:
            timer = threading.Timer(0.3, release_gated_calls, (tmp_path,))
            timer.start()
            request = begin_request(lambda: "t2-deadline-1")
            with pytest.raises(DeadlineExceededError, match="past its deadline"):
                plane.infer_blocking(SPEC, "gated", X, deadline=time.monotonic() + 0.1)
            end_request(request)
            timer.join()
            assert "Request t2-deadline-1: model m" in caplog.text
            assert "gated: DEADLINE_EXCEEDED (deadline 0.1" in caplog.text
            assert _served(plane)  # its place in the model's share is free again
        finally:
            plane.close()
