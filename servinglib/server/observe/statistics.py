"""InferenceStatistics: Triton's per-model-version statistics, counted on the request path."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import final

import attrs

from servinglib.servable import CallStages
from servinglib.server.observe.call_record import CallRecord


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
    since the epoch (0: never).  As Triton counts them: a request answered
    from the response cache is a ``success`` and a ``cache_hit`` (its lookup's
    time), not an inference nor an execution, nor in the compute counts; a
    request the cache missed is a ``cache_miss`` (its lookup and insertion)
    beside its usual counts.
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
    cache_hit: StatisticDuration = StatisticDuration()
    cache_miss: StatisticDuration = StatisticDuration()
    batches: tuple[BatchStatistics, ...] = ()


@final
class _Counters:
    """One version's running totals (stage counts equal ``successes``).  Guarded by the lock."""

    __slots__ = (
        "batches",
        "cache_hit_ns",
        "cache_hits",
        "cache_miss_ns",
        "cache_misses",
        "executions",
        "fail_ns",
        "failures",
        "infer_ns",
        "inferences",
        "input_ns",
        "last_end_ns",
        "output_ns",
        "queue_ns",
        "success_ns",
        "successes",
    )

    def __init__(self) -> None:
        self.successes = self.success_ns = self.failures = self.fail_ns = 0
        self.queue_ns = self.input_ns = self.infer_ns = self.output_ns = 0
        self.executions = self.inferences = 0
        self.cache_hits = self.cache_hit_ns = self.cache_misses = self.cache_miss_ns = 0
        self.last_end_ns = 0  # time.perf_counter_ns() of the last request's end; 0: none
        self.batches: dict[int, list[int]] = {}  # batch size → [count, input, infer, output ns]

    def copy(self) -> _Counters:
        copy = _Counters()
        for name in _Counters.__slots__:
            setattr(copy, name, getattr(self, name))
        copy.batches = {size: list(row) for size, row in self.batches.items()}
        return copy


@final
class InferenceStatistics:
    """Counts every inference request by model version: outcomes, stage durations, batches.

    The DataPlane calls :meth:`record_success` or :meth:`record_failure`
    once per request that reached a version; :meth:`snapshot` reads them.
    Costs one lock and a few additions per request (about 1 µs).
    Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._versions: dict[tuple[str, int], _Counters] = {}  # guarded by: _lock

    def record_success(
        self, name: str, version: int, started_ns: int, ended_ns: int, stages: CallStages
    ) -> None:
        """A request of ``name`` ``version`` succeeded; its span and stage marks.

        ``started_ns`` and ``ended_ns`` are ``time.perf_counter_ns()`` marks.
        A batched request (``stages.batch_size`` set) counts its batch's
        execution only when it ``leads_batch``; any other request is one
        execution of batch size 1.  A request counts ``stages.rows``
        inferences (0: one), as Triton counts each row of a batched model's.
        A request the response cache answered (``stages.cache_hit``) counts as
        a success and a cache hit only.
        """
        if stages.cache_hit:
            self._record_cache_hit(name, version, ended_ns - started_ns, ended_ns, stages.cache_ns)
            return
        started = stages.started_ns
        compute_input = stages.infer_started_ns - started
        compute_infer = stages.infer_ended_ns - stages.infer_started_ns
        compute_output = stages.ended_ns - stages.infer_ended_ns
        with self._lock:
            counters = self._versions.get((name, version))
            if counters is None:
                counters = self._versions[name, version] = _Counters()
            counters.successes += 1
            counters.inferences += stages.rows or 1
            counters.success_ns += ended_ns - started_ns
            if stages.queued_ns:
                counters.queue_ns += started - stages.queued_ns
            counters.input_ns += compute_input
            counters.infer_ns += compute_infer
            counters.output_ns += compute_output
            counters.last_end_ns = ended_ns
            if stages.cache_hit is False:
                counters.cache_misses += 1
                counters.cache_miss_ns += stages.cache_ns
            if stages.batch_size == 0 or stages.leads_batch:
                counters.executions += 1
                batch = counters.batches.get(stages.batch_size or 1)
                if batch is None:
                    batch = counters.batches[stages.batch_size or 1] = [0, 0, 0, 0]
                batch[0] += 1
                batch[1] += compute_input
                batch[2] += compute_infer
                batch[3] += compute_output

    def _record_cache_hit(
        self, name: str, version: int, duration_ns: int, ended_ns: int, cache_ns: int
    ) -> None:
        with self._lock:
            counters = self._versions.get((name, version))
            if counters is None:
                counters = self._versions[name, version] = _Counters()
            counters.successes += 1
            counters.success_ns += duration_ns
            counters.cache_hits += 1
            counters.cache_hit_ns += cache_ns
            counters.last_end_ns = ended_ns

    def call_finished(self, record: CallRecord) -> None:
        """Counts a finished call (a :class:`CallObserver`): a stream (a decoupled model's
        request) as one request, as Triton counts it, from its start to its last part."""
        if record.error is None:
            self.record_success(
                record.model_name, record.version, record.started_ns, record.ended_ns, record.stages
            )
        else:
            self.record_failure(
                record.model_name, record.version, record.started_ns, record.ended_ns
            )

    def record_failure(self, name: str, version: int, started_ns: int, ended_ns: int) -> None:
        """A request of ``name`` ``version`` failed (``time.perf_counter_ns()`` marks)."""
        with self._lock:
            counters = self._versions.get((name, version))
            if counters is None:
                counters = self._versions[name, version] = _Counters()
            counters.failures += 1
            counters.fail_ns += ended_ns - started_ns
            counters.last_end_ns = ended_ns

    def snapshot(
        self, versions: Iterable[tuple[str, int]] | None = None
    ) -> list[VersionStatistics]:
        """The statistics of ``versions`` (None: every version counted), sorted by name, version.

        A version with no request yet has all zeros.
        """
        with self._lock:
            keys = sorted(self._versions if versions is None else set(versions))
            copies = [(key, self._versions.get(key)) for key in keys]
            copies = [(key, None if c is None else c.copy()) for key, c in copies]
        epoch_offset_ns = time.time_ns() - time.perf_counter_ns()
        return [
            _statistics(name, version, counters, epoch_offset_ns)
            for (name, version), counters in copies
        ]

    def versions(self, name: str) -> list[int]:
        """The versions of ``name`` that have statistics, sorted."""
        with self._lock:
            return sorted(version for model, version in self._versions if model == name)


def _statistics(
    name: str, version: int, counters: _Counters | None, epoch_offset_ns: int
) -> VersionStatistics:
    if counters is None:
        return VersionStatistics(name=name, version=version)
    successes = counters.successes
    computed = successes - counters.cache_hits  # Triton's compute counts leave hits out
    last_ms = (counters.last_end_ns + epoch_offset_ns) // 1_000_000 if counters.last_end_ns else 0
    return VersionStatistics(
        name=name,
        version=version,
        last_inference_ms=last_ms,
        inference_count=counters.inferences,
        execution_count=counters.executions,
        success=StatisticDuration(successes, counters.success_ns),
        fail=StatisticDuration(counters.failures, counters.fail_ns),
        queue=StatisticDuration(successes, counters.queue_ns),
        compute_input=StatisticDuration(computed, counters.input_ns),
        compute_infer=StatisticDuration(computed, counters.infer_ns),
        compute_output=StatisticDuration(computed, counters.output_ns),
        cache_hit=StatisticDuration(counters.cache_hits, counters.cache_hit_ns),
        cache_miss=StatisticDuration(counters.cache_misses, counters.cache_miss_ns),
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
