"""BatchingServable: concurrent requests share one model call, and each gets exactly its rows."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from servinglib.batching import BatchingParameters, BatchingServable, SharedBatchScheduler
from servinglib.errors import (
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    ServingError,
)
from servinglib.loaders import PythonModel, signature
from servinglib.loaders.python import PythonServable
from servinglib.servable import (
    ExecutionMode,
    Servable,
    SignatureSpec,
    Tensors,
    TensorSpec,
    call_signature,
    deadline_scope,
    resolve_signature,
    start_stream,
)
from servinglib.testing import FakeClock, wait_until

X = TensorSpec("x", np.float32, [-1, -1])
Y = TensorSpec("y", np.float32, [-1, -1])
ROWS = TensorSpec("rows", np.int64, [-1])


class Recording(Servable):
    """y = 2x (+ the row count, as an extra output); records the rows of each call."""

    def __init__(self) -> None:
        self.calls: list[int] = []
        self.closed = False
        self.gate = threading.Event()
        self.gate.set()
        self._lock = threading.Lock()

    @property
    def signatures(self) -> Mapping[str, SignatureSpec]:
        return {
            "serving_default": SignatureSpec([X], [Y, ROWS]),
            "total": SignatureSpec([X], [TensorSpec("total", np.float32, [])]),
            "coroutine": SignatureSpec([X], [Y], execution_mode=ExecutionMode.ASYNC),
            "no_batch_output": SignatureSpec([X], [TensorSpec("total", np.float32, None)]),
            "fails_on_negative": SignatureSpec([X], [Y]),
        }

    def rows_called(self) -> list[int]:
        with self._lock:
            return list(self.calls)

    def call(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> dict[str, npt.NDArray[Any]]:
        self.gate.wait(30)
        x = inputs["x"]
        with self._lock:
            self.calls.append(x.shape[0])
        if signature_name in {"total", "no_batch_output"}:
            return {"total": np.float32(x.sum())}
        if signature_name == "fails_on_negative" and (x < 0).any():
            raise ValueError("negative input")
        outputs = {"y": x * 2, "rows": np.full(x.shape[0], x.shape[0], np.int64)}
        if signature_name == "fails_on_negative":
            del outputs["rows"]
        if output_filter is not None:
            outputs = {k: v for k, v in outputs.items() if k in output_filter}
        return outputs

    async def call_async(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> dict[str, npt.NDArray[Any]]:
        return {"y": inputs["x"] * 3}

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def scheduler(clock: FakeClock) -> Iterator[SharedBatchScheduler]:
    scheduler = SharedBatchScheduler(2, clock=clock)
    yield scheduler
    scheduler.close()


def wrap(
    scheduler: SharedBatchScheduler, model: Recording | None = None, **options: Any
) -> tuple[BatchingServable, Recording]:
    model = model if model is not None else Recording()
    params = BatchingParameters(**{"max_batch_size": 64, **options})
    return BatchingServable(model, scheduler, params, name="m/1"), model


def x(*values: float, width: int = 1) -> npt.NDArray[np.float32]:
    return np.repeat(np.array(values, np.float32)[:, None], width, axis=1)


def test_batched_signatures_are_async_and_the_others_pass_through(
    scheduler: SharedBatchScheduler,
) -> None:
    """Signatures with a batch dimension are batched (and ASYNC); scalar or ASYNC ones are not."""
    servable, _ = wrap(scheduler)
    assert servable.batched_signatures == {
        "serving_default",
        "no_batch_output",
        "fails_on_negative",
    }
    assert servable.signatures["serving_default"].execution_mode is ExecutionMode.ASYNC
    assert servable.signatures["total"].execution_mode is ExecutionMode.THREAD
    assert call_signature(servable, "total", {"x": x(1, 2)})["total"] == 3
    assert asyncio.run(servable.call_async("coroutine", {"x": x(1)}))["y"].tolist() == [[3.0]]


def test_concurrent_requests_merge_into_one_call(
    scheduler: SharedBatchScheduler, clock: FakeClock
) -> None:
    """Requests waiting for the same batch run in one model call and each gets its own rows."""
    servable, model = wrap(scheduler, batch_timeout_s=1.0)
    with ThreadPoolExecutor(8) as pool:
        futures = [
            pool.submit(call_signature, servable, None, {"x": x(i, i + 0.5)}) for i in range(8)
        ]
        wait_until(lambda: servable_queue_depth(scheduler) == 8)
        clock.advance(1.0)
        results = [f.result(10) for f in futures]
    assert model.rows_called() == [16]
    for i, result in enumerate(results):
        assert result["y"][:, 0].tolist() == [2 * i, 2 * i + 1]
        assert result["rows"].tolist() == [16, 16]


def servable_queue_depth(scheduler: SharedBatchScheduler) -> int:
    return scheduler.statistics()["m/1/serving_default"].queued_tasks


def test_64_threads_each_receive_exactly_their_own_rows(scheduler: SharedBatchScheduler) -> None:
    """Under 64 concurrent callers with distinct values, every caller gets back exactly its rows."""
    servable, model = wrap(scheduler, batch_timeout_s=0.0)
    clients = 64
    start = threading.Barrier(clients)

    def client(i: int) -> bool:
        start.wait(10)
        ok = True
        for j in range(20):
            value = i * 1000 + j
            rows = 1 + (i + j) % 3
            got = call_signature(servable, None, {"x": x(*([value] * rows), width=2)})
            ok &= got["y"].shape == (rows, 2) and bool((got["y"] == 2 * value).all())
        return ok

    with ThreadPoolExecutor(clients) as pool:
        assert all(pool.map(client, range(clients)))
    assert sum(model.rows_called()) == sum(
        1 + (i + j) % 3 for i in range(clients) for j in range(20)
    )


def test_batches_pad_to_the_next_allowed_size(
    scheduler: SharedBatchScheduler, clock: FakeClock
) -> None:
    """The model sees the batch padded to an allowed size; callers never see the padding."""
    servable, model = wrap(
        scheduler, max_batch_size=8, allowed_batch_sizes=[4, 8], batch_timeout_s=1
    )
    with ThreadPoolExecutor(2) as pool:
        a = pool.submit(call_signature, servable, None, {"x": x(1, 2)})
        b = pool.submit(call_signature, servable, None, {"x": x(3, 4, 5)})
        wait_until(lambda: servable_queue_depth(scheduler) == 2)
        clock.advance(1)
        assert a.result(10)["y"][:, 0].tolist() == [2, 4]
        assert b.result(10)["y"][:, 0].tolist() == [6, 8, 10]
    assert model.rows_called() == [8]
    assert scheduler.statistics()["m/1/serving_default"].padding_rows == 3


def test_mismatched_shapes_run_as_separate_calls(
    scheduler: SharedBatchScheduler, clock: FakeClock
) -> None:
    """Without padding, requests of different widths run in separate calls, both correctly."""
    servable, model = wrap(scheduler, batch_timeout_s=1)
    with ThreadPoolExecutor(2) as pool:
        narrow = pool.submit(call_signature, servable, None, {"x": x(1, width=1)})
        wide = pool.submit(call_signature, servable, None, {"x": x(2, width=3)})
        wait_until(lambda: servable_queue_depth(scheduler) == 2)
        clock.advance(1)
        assert narrow.result(10)["y"].shape == (1, 1)
        assert wide.result(10)["y"].tolist() == [[4, 4, 4]]
    assert sorted(model.rows_called()) == [1, 1]


def test_variable_length_inputs_are_padded_into_one_call(
    scheduler: SharedBatchScheduler, clock: FakeClock
) -> None:
    """With pad_variable_length_inputs, differing widths are padded and run in one call."""
    servable, model = wrap(scheduler, batch_timeout_s=1, pad_variable_length_inputs=True)
    with ThreadPoolExecutor(2) as pool:
        narrow = pool.submit(call_signature, servable, None, {"x": x(1, width=1)})
        wide = pool.submit(call_signature, servable, None, {"x": x(2, width=3)})
        wait_until(lambda: servable_queue_depth(scheduler) == 2)
        clock.advance(1)
        assert narrow.result(10)["y"].tolist() == [[2, 2, 2]]
        assert wide.result(10)["y"].tolist() == [[4, 4, 4]]
    assert model.rows_called() == [2]


def test_a_model_error_fails_only_its_batch(scheduler: SharedBatchScheduler) -> None:
    """A signature that raises fails the requests of that batch; later requests succeed."""
    servable, _ = wrap(scheduler)
    with pytest.raises(ServingError, match="negative input"):
        call_signature(servable, "fails_on_negative", {"x": x(-1)})
    assert call_signature(servable, "fails_on_negative", {"x": x(1)})["y"].tolist() == [[2]]


def test_an_output_without_batch_dimension_is_a_clear_error(
    scheduler: SharedBatchScheduler,
) -> None:
    """A batched signature returning a scalar output fails with FAILED_PRECONDITION naming it."""
    servable, _ = wrap(scheduler)
    with pytest.raises(FailedPreconditionError, match=r"'total'.*dimension 0"):
        call_signature(servable, "no_batch_output", {"x": x(1)})


def test_scalar_inputs_are_rejected(scheduler: SharedBatchScheduler) -> None:
    """A request without a batch dimension is INVALID_ARGUMENT before it is queued."""
    servable, _ = wrap(scheduler)
    with pytest.raises(InvalidArgumentError):
        servable.call("serving_default", {"x": np.float32(1)})  # type: ignore[dict-item]


def test_a_queued_request_past_its_deadline_fails(scheduler: SharedBatchScheduler) -> None:
    """A synchronous call waits for its batch no longer than the request's deadline."""
    servable, model = wrap(scheduler, batch_timeout_s=60)  # the fake clock never fires it
    with deadline_scope(time.monotonic() + 0.05), pytest.raises(DeadlineExceededError):
        call_signature(servable, None, {"x": x(1)})
    assert model.rows_called() == []


def test_cancelled_requests_are_skipped(scheduler: SharedBatchScheduler, clock: FakeClock) -> None:
    """A request whose caller gave up (asyncio cancellation) never reaches the model."""
    servable, model = wrap(scheduler, batch_timeout_s=1)

    async def run() -> list[float]:
        doomed = asyncio.ensure_future(servable.call_async("serving_default", {"x": x(7)}))
        kept = asyncio.ensure_future(servable.call_async("serving_default", {"x": x(1)}))
        while servable_queue_depth(scheduler) < 2:
            await asyncio.sleep(0.001)
        doomed.cancel()
        clock.advance(1)
        result = await kept
        return [float(v) for v in result["y"][:, 0]]

    assert asyncio.run(run()) == [2.0]
    assert model.rows_called() == [1]


def test_large_requests_are_split_across_batches(scheduler: SharedBatchScheduler) -> None:
    """With splitting, a request larger than a batch runs in pieces and comes back whole."""
    servable, model = wrap(
        scheduler, max_batch_size=10, enable_large_batch_splitting=True, max_execution_batch_size=4
    )
    values = list(range(10))
    result = call_signature(servable, None, {"x": x(*values)})
    assert result["y"][:, 0].tolist() == [2 * v for v in values]
    assert all(rows <= 4 for rows in model.rows_called())
    assert sum(model.rows_called()) == 10


def test_output_filters_are_honoured_per_request(
    scheduler: SharedBatchScheduler, clock: FakeClock
) -> None:
    """Requests in one batch asking for different outputs each get just what they asked for."""
    servable, _ = wrap(scheduler, batch_timeout_s=1)
    with ThreadPoolExecutor(2) as pool:
        only_y = pool.submit(call_signature, servable, None, {"x": x(1)}, ["y"])
        both = pool.submit(call_signature, servable, None, {"x": x(2)})
        wait_until(lambda: servable_queue_depth(scheduler) == 2)
        clock.advance(1)
        assert set(only_y.result(10)) == {"y"}
        assert set(both.result(10)) == {"y", "rows"}


def test_close_closes_queues_then_the_wrapped_servable(scheduler: SharedBatchScheduler) -> None:
    """Closing the wrapper removes its queues from the scheduler and closes the wrapped servable."""
    servable, model = wrap(scheduler)
    servable.close()
    assert model.closed
    assert scheduler.statistics() == {}


def test_streaming_signatures_pass_through_unbatched(scheduler: SharedBatchScheduler) -> None:
    """A streaming signature is not batched: its parts stream from the wrapped servable."""

    class Parts(PythonModel):
        @signature(
            name="serving_default",
            inputs=[TensorSpec("x", "float32", [-1, 1])],
            outputs=[TensorSpec("y", "float32", [-1, 1])],
        )
        def parts(self, x: Any) -> Any:
            yield {"y": x}
            yield {"y": x * 2}

    servable = BatchingServable(
        PythonServable(Parts()), scheduler, BatchingParameters(max_batch_size=8), name="p/1"
    )
    assert servable.batched_signatures == frozenset()
    name, spec = resolve_signature(servable, None)
    assert spec.streaming
    parts, _ = start_stream(servable, name, spec, {"x": x(3)})
    assert [p["y"].tolist() for p in parts] == [[[3.0]], [[6.0]]]  # type: ignore[union-attr]
