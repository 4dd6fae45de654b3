"""Shadowing: answered calls copied to a model's shadow version off the request path, compared."""

from __future__ import annotations

import bisect
import logging
import queue
import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import numpy as np
import numpy.typing as npt

from servinglib.request_extras import RequestExtras, request_extras, request_extras_scope
from servinglib.server.model_spec import ModelSpec
from servinglib.server.observe.call_record import CallRecord
from servinglib.server.observe.request_context import begin_request, end_request, request_id
from servinglib.server.observe.series import SCRAPED

if TYPE_CHECKING:
    from servinglib.servable import Tensors
    from servinglib.server.server_core import ServerCore
    from servinglib.server.traffic_rule import ShadowRule

_log = logging.getLogger("servinglib.server.shadow")

Outputs = Mapping[str, npt.NDArray[Any]]
RunShadow = Callable[[ModelSpec, str, "Tensors", "Iterable[str] | None"], Outputs]
"""Runs one shadow call: the version and signature, the primary's inputs and output filter."""

DEFAULT_MAX_QUEUED: Final = 64
"""Copies waiting for the shadow thread at most; past it, a copy is dropped (and counted)."""

DEFAULT_MAX_IDLE_WAIT_S: Final = 1.0
"""How long a copy waits for its model to have no request in flight; past it, dropped."""

_IDLE_POLL_S: Final = 0.005
"""How often a waiting copy looks again without being woken (a request may leave the
in-flight count after the observers heard of its call)."""

LATENCY_BUCKETS_S: Final = SCRAPED["shadow_latency"].buckets
"""The upper bounds of the shadow latency histogram's buckets, in seconds."""

OUTCOMES: Final = ("agreed", "disagreed", "failed", "dropped")
"""What became of a copy: its outputs agreed, disagreed, the shadow call raised, never sent."""


@final
@attrs.frozen
class ShadowUsage:
    """What shadowing counted: copies by (model, outcome), and the shadow calls' latency by model
    (non-cumulative counts per bucket of :data:`LATENCY_BUCKETS_S` and +Inf, and their sum in
    seconds).  Immutable."""

    outcomes: Mapping[tuple[str, str], int]
    latency: Mapping[str, tuple[tuple[int, ...], float]]


@final
@attrs.frozen
class _Copy:
    spec: ModelSpec
    rule: ShadowRule
    primary_version: int
    inputs: Tensors
    outputs: Outputs
    output_filter: tuple[str, ...] | None
    request_id: str
    extras: RequestExtras


@final
class Shadowing:
    """A :class:`~servinglib.server.observe.call_record.CallObserver` copying answered calls of
    models whose traffic rule names a shadow version to that version, and comparing.

    A call is copied when its model's rule (``core.config``) has a
    ``shadow``, it answered (no error, not a stream), it ran another
    version than the shadow, and a draw falls within the rule's
    ``fraction``.  The copy is queued (at most ``max_queued``: past it,
    dropped and counted) and run by one thread of its own with ``run``, in
    the primary request's id and extras, after the client has its answer:
    a slow or failing shadow never delays or changes the client's.  With
    ``in_flight`` (the model's requests in flight now, the copies not
    counted), a copy runs only once its model has none: it waits (woken by
    a call of the model that leaves it idle, looking again every 5 ms) at
    most ``max_idle_wait_s``, then is dropped and counted, so the shadow
    takes only time its model leaves idle.  (The
    thread keeps its normal priority: at ``SCHED_IDLE`` it would be
    preempted while holding the GIL, stalling every primary.)  Its
    outputs agree when every output the primary returned is there with the
    same shape and every element within the rule's ``tolerance``.
    Thread-safe.
    """

    def __init__(
        self,
        core: ServerCore,
        run: RunShadow,
        *,
        max_queued: int = DEFAULT_MAX_QUEUED,
        in_flight: Callable[[str], int] | None = None,
        max_idle_wait_s: float = DEFAULT_MAX_IDLE_WAIT_S,
    ) -> None:
        self._core = core
        self._run = run
        self._in_flight = in_flight
        self._max_idle_wait_s = max_idle_wait_s
        self._wake = threading.Event()
        self._waiting_for: str | None = None  # the model a copy waits for; shadow thread writes
        self._queue: queue.Queue[_Copy | None] = queue.Queue(max_queued)
        self._lock = threading.Lock()
        self._outcomes: dict[tuple[str, str], int] = {}  # guarded by: _lock
        self._latency: dict[str, tuple[list[int], float]] = {}  # guarded by: _lock
        self._thread: threading.Thread | None = None  # guarded by: _lock
        self._closed = False  # guarded by: _lock

    def call_finished(self, record: CallRecord) -> None:
        """Queues a copy of ``record``'s call when its model's rule asks for one; wakes a copy
        waiting for its model to be idle."""
        if record.model_name == self._waiting_for and not self._busy(record.model_name):
            self._wake.set()
        if record.error is not None or record.outputs is None or record.stream is not None:
            return
        if self._closed:
            return
        model = self._core.config.model(record.model_name)
        if model is None or model.traffic is None or (rule := model.traffic.shadow) is None:
            return
        if record.version == rule.version or random.random() >= rule.fraction:
            return
        extras = request_extras()
        copy = _Copy(
            ModelSpec(record.model_name, rule.version, signature_name=record.signature_name),
            rule,
            record.version,
            record.inputs,
            record.outputs,
            record.output_filter,
            request_id() or extras.request_id,
            extras,
        )
        try:
            self._queue.put_nowait(copy)
        except queue.Full:
            self._count(record.model_name, "dropped")
            return
        self._start()

    def usage(self) -> ShadowUsage:
        """A snapshot of what was counted."""
        with self._lock:
            latency = {m: (tuple(b), s) for m, (b, s) in self._latency.items()}
            return ShadowUsage(dict(self._outcomes), latency)

    def idle(self) -> bool:
        """True when no copy is queued or running (for tests and drains)."""
        return self._queue.unfinished_tasks == 0

    def close(self) -> None:
        """Drops the copies still queued; the thread ends after the copy it runs (not waited
        for: a shadow that hangs never holds up a shutdown).  Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            started = self._thread is not None
        self._wake.set()
        while True:
            try:
                self._queue.get_nowait()
                self._queue.task_done()
            except queue.Empty:
                break
        if started:
            self._queue.put(None)

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None or self._closed:
                return
            self._thread = threading.Thread(
                target=self._serve, name="servinglib-shadow", daemon=True
            )
            self._thread.start()

    def _serve(self) -> None:
        while (copy := self._queue.get()) is not None:
            try:
                if self._wait_for_idle(copy.spec.name):
                    self._shadow(copy)
                else:
                    self._count(copy.spec.name, "dropped")
            except Exception:  # noqa: BLE001 - the thread serves every later copy too
                _log.exception("Shadow call of %s failed unexpectedly", copy.spec)
            finally:
                self._queue.task_done()
        self._queue.task_done()

    def _busy(self, name: str) -> bool:
        return self._in_flight is not None and self._in_flight(name) > 0

    def _wait_for_idle(self, name: str) -> bool:
        """True once model ``name`` has no request in flight; False past the wait or on close."""
        in_flight = self._in_flight
        if in_flight is None or not in_flight(name):
            return True
        give_up = time.monotonic() + self._max_idle_wait_s
        self._waiting_for = name
        try:
            while True:
                self._wake.clear()
                if not in_flight(name):  # looked at after the clear: no wake-up is missed
                    return True
                remaining = give_up - time.monotonic()
                if remaining <= 0 or self._closed:
                    return False
                self._wake.wait(min(remaining, _IDLE_POLL_S))
        finally:
            self._waiting_for = None

    def _shadow(self, copy: _Copy) -> None:
        name = copy.spec.name
        token = begin_request(lambda: copy.request_id)
        started = time.perf_counter()
        try:
            with request_extras_scope(copy.extras):
                outputs = self._run(
                    copy.spec, copy.spec.signature_name, copy.inputs, copy.output_filter
                )
        except Exception as error:  # noqa: BLE001 - a failing shadow is counted, not raised
            self._count(name, "failed")
            _log.info("Request %s: shadow %s failed: %s", copy.request_id, copy.spec, error)
            return
        finally:
            end_request(token)
        self._observe_latency(name, time.perf_counter() - started)
        if agree(copy.outputs, outputs, copy.rule.tolerance):
            self._count(name, "agreed")
            return
        self._count(name, "disagreed")
        if copy.rule.log_disagreements:
            _log.warning(
                "Request %s: model %s version %d disagrees with version %d (tolerance %g)",
                copy.request_id or "-",
                name,
                copy.rule.version,
                copy.primary_version,
                copy.rule.tolerance,
            )

    def _count(self, name: str, outcome: str) -> None:
        with self._lock:
            key = (name, outcome)
            self._outcomes[key] = self._outcomes.get(key, 0) + 1

    def _observe_latency(self, name: str, seconds: float) -> None:
        with self._lock:
            buckets, total = self._latency.get(name) or ([0] * (len(LATENCY_BUCKETS_S) + 1), 0.0)
            buckets[bisect.bisect_left(LATENCY_BUCKETS_S, seconds)] += 1
            self._latency[name] = (buckets, total + seconds)


def agree(primary: Outputs, shadow: Outputs, tolerance: float) -> bool:
    """True when ``shadow`` has each of ``primary``'s outputs with its shape, and every element
    equal, or within ``tolerance`` for numbers (NaN agrees with NaN)."""
    for name, primary_output in primary.items():
        if (shadow_output := shadow.get(name)) is None:
            return False
        expected, got = np.asarray(primary_output), np.asarray(shadow_output)
        if expected.shape != got.shape:
            return False
        numeric = expected.dtype.kind in "iufc" and got.dtype.kind in "iufc"
        if not numeric:
            if not np.array_equal(expected, got):
                return False
        elif not np.allclose(expected, got, rtol=0.0, atol=tolerance, equal_nan=True):
            return False
    return True
