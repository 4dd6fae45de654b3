"""InferenceStatistics: Triton's per-model-version statistics, counted on the request path.

What Triton's statistics extension reports (``GET /v2/models/stats``, gRPC
``ModelStatistics``), with these meanings in servinglib:

- ``success`` / ``fail``: requests that reached a version (the lookup
  found one) and succeeded or failed, with the time from the DataPlane's
  start of the request to its end (decoding and encoding in the front end
  excluded, as in Triton).
- ``queue``: the wait for a worker of the pool (THREAD signatures) or in a
  batch queue (batched ones); 0 for INLINE and ASYNC signatures.
- ``compute_input``: checking the inputs against the signature, and for a
  batch, merging and padding the requests' inputs.
- ``compute_infer``: the model's own call (for a batch, the merged call).
- ``compute_output``: checking the outputs, and for a batch, splitting them.
- ``inference_count``: successful requests; ``execution_count``: model
  calls (a batch is one call for all its requests).
- ``batch_stats``: per batch size (1 for unbatched calls), the executions
  and their compute durations.

The stage durations are those of successful requests, as Triton's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import final

import attrs

from servinglib.servable import CallStages


@final
@attrs.frozen
class StatisticDuration:
    """A count and the cumulative nanoseconds of what it counts.  Immutable."""

    count: int = 0
    ns: int = 0


@final
@attrs.frozen
class BatchStatistics:
    """The model executions of one batch size and their compute durations.  Immutable."""

    batch_size: int
    compute_input: StatisticDuration
    compute_infer: StatisticDuration
    compute_output: StatisticDuration


@final
@attrs.frozen(kw_only=True)
class VersionStatistics:
    """One model version's statistics since the server started (see the module).  Immutable.

    ``last_inference_ms``: when its last request ended, in milliseconds
    since the epoch (0: never).
    """

    name: str
    version: int
    last_inference_ms: int = 0
    inference_count: int = 0
    execution_count: int = 0
    success: StatisticDuration = StatisticDuration()
    fail: StatisticDuration = StatisticDuration()
    queue: StatisticDuration = StatisticDuration()
    compute_input: StatisticDuration = StatisticDuration()
    compute_infer: StatisticDuration = StatisticDuration()
    compute_output: StatisticDuration = StatisticDuration()
    batches: tuple[BatchStatistics, ...] = ()


# The slots of a version's counter row: a count and a sum of nanoseconds for each duration.
_SUCCESS, _FAIL, _QUEUE, _INPUT, _INFER, _OUTPUT = 0, 2, 4, 6, 8, 10
_ROW = 12


@final
class _Counters:
    """One version's running totals.  Guarded by the InferenceStatistics' lock."""

    __slots__ = ("batches", "executions", "last_ms", "row")

    def __init__(self) -> None:
        self.row = [0] * _ROW
        self.executions = 0
        self.last_ms = 0
        self.batches: dict[int, list[int]] = {}  # batch size → [count, input, infer, output ns]


@final
class InferenceStatistics:
    """Counts every inference request by model version: outcomes, stage durations, batches.

    The DataPlane calls :meth:`record_success` or :meth:`record_failure`
    once per request that reached a version; :meth:`snapshot` reads them.
    Costs one lock and a few additions per request.
    Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._versions: dict[tuple[str, int], _Counters] = {}  # guarded by: _lock

    def record_success(self, name: str, version: int, duration_ns: int, stages: CallStages) -> None:
        """A request of ``name`` ``version`` succeeded after ``duration_ns``; its stage marks.

        A batched request (``stages.batch_size`` set) counts its batch's
        execution only when it ``leads_batch``; any other request is one
        execution of batch size 1.
        """
        started = stages.started_ns
        queue = started - stages.queued_ns if stages.queued_ns else 0
        compute_input = stages.infer_started_ns - started
        compute_infer = stages.infer_ended_ns - stages.infer_started_ns
        compute_output = stages.ended_ns - stages.infer_ended_ns
        batch_size = stages.batch_size
        executes = batch_size == 0 or stages.leads_batch
        now_ms = time.time_ns() // 1_000_000
        with self._lock:
            counters = self._versions.get((name, version))
            if counters is None:
                counters = self._versions[name, version] = _Counters()
            row = counters.row
            row[_SUCCESS] += 1
            row[_SUCCESS + 1] += duration_ns
            row[_QUEUE] += 1
            row[_QUEUE + 1] += queue
            row[_INPUT] += 1
            row[_INPUT + 1] += compute_input
            row[_INFER] += 1
            row[_INFER + 1] += compute_infer
            row[_OUTPUT] += 1
            row[_OUTPUT + 1] += compute_output
            counters.last_ms = now_ms
            if executes:
                counters.executions += 1
                size = batch_size or 1
                batch = counters.batches.get(size)
                if batch is None:
                    batch = counters.batches[size] = [0, 0, 0, 0]
                batch[0] += 1
                batch[1] += compute_input
                batch[2] += compute_infer
                batch[3] += compute_output

    def record_failure(self, name: str, version: int, duration_ns: int) -> None:
        """A request of ``name`` ``version`` failed after ``duration_ns``."""
        now_ms = time.time_ns() // 1_000_000
        with self._lock:
            counters = self._versions.get((name, version))
            if counters is None:
                counters = self._versions[name, version] = _Counters()
            counters.row[_FAIL] += 1
            counters.row[_FAIL + 1] += duration_ns
            counters.last_ms = now_ms

    def snapshot(
        self, versions: Iterable[tuple[str, int]] | None = None
    ) -> list[VersionStatistics]:
        """The statistics of ``versions`` (None: every version counted), sorted by name, version.

        A version with no request yet has all zeros.
        """
        with self._lock:
            keys = sorted(self._versions if versions is None else set(versions))
            copies = [(key, _copy(self._versions.get(key))) for key in keys]
        return [_statistics(name, version, counters) for (name, version), counters in copies]

    def versions(self, name: str) -> list[int]:
        """The versions of ``name`` that have statistics, sorted."""
        with self._lock:
            return sorted(version for model, version in self._versions if model == name)


def _copy(counters: _Counters | None) -> _Counters | None:
    if counters is None:
        return None
    copy = _Counters()
    copy.row = list(counters.row)
    copy.executions = counters.executions
    copy.last_ms = counters.last_ms
    copy.batches = {size: list(row) for size, row in counters.batches.items()}
    return copy


def _statistics(name: str, version: int, counters: _Counters | None) -> VersionStatistics:
    if counters is None:
        return VersionStatistics(name=name, version=version)
    row = counters.row

    def duration(slot: int) -> StatisticDuration:
        return StatisticDuration(row[slot], row[slot + 1])

    return VersionStatistics(
        name=name,
        version=version,
        last_inference_ms=counters.last_ms,
        inference_count=row[_SUCCESS],
        execution_count=counters.executions,
        success=duration(_SUCCESS),
        fail=duration(_FAIL),
        queue=duration(_QUEUE),
        compute_input=duration(_INPUT),
        compute_infer=duration(_INFER),
        compute_output=duration(_OUTPUT),
        batches=tuple(
            BatchStatistics(
                size,
                StatisticDuration(count, input_ns),
                StatisticDuration(count, infer_ns),
                StatisticDuration(count, output_ns),
            )
            for size, (count, input_ns, infer_ns, output_ns) in sorted(counters.batches.items())
        ),
    )
