"""Tests for servinglib.core.loader_harness: the transition table, load retries and unload."""

from __future__ import annotations

import contextlib
import itertools
import threading
from collections.abc import Callable, Iterator, Sequence

import attrs
import pytest

from servinglib.core.loader import Loader
from servinglib.core.loader_harness import (
    ALLOWED_TRANSITIONS,
    HarnessState,
    LoaderHarness,
    LoadOutcome,
    LoadRetryOptions,
    retry_unless_permanent,
)
from servinglib.core.resources import ResourceAllocation
from servinglib.core.servable_id import ServableId
from servinglib.errors import (
    CancelledError,
    DataLossError,
    FailedPreconditionError,
    InternalError,
    ServingError,
    StatusCode,
    UnavailableError,
    UnknownError,
)

S = HarnessState
ID = ServableId("m", 1)
TIMEOUT_S = 10.0
NO_WAIT = LoadRetryOptions(max_num_load_retries=0, load_retry_interval_s=0.0)


class ScriptedLoader(Loader):
    """Plays back load outcomes (None succeeds, an exception is raised) and counts calls."""

    def __init__(
        self,
        outcomes: Sequence[Exception | None] = (),
        unload_error: Exception | None = None,
    ) -> None:
        self._outcomes = list(outcomes)
        self._unload_error = unload_error
        self.load_calls = 0
        self.unload_calls = 0
        self.during_load: Callable[[], None] | None = None
        self.during_unload: Callable[[], None] | None = None

    def estimate_resources(self) -> ResourceAllocation:
        return ResourceAllocation.empty()

    def load(self) -> None:
        self.load_calls += 1
        if self.during_load is not None:
            self.during_load()
        outcome = self._outcomes.pop(0) if self._outcomes else None
        if outcome is not None:
            raise outcome

    def unload(self) -> None:
        self.unload_calls += 1
        if self.during_unload is not None:
            self.during_unload()
        if self._unload_error is not None:
            raise self._unload_error

    def servable(self) -> str:
        return "the servable"


def _load_and_ready(harness: LoaderHarness) -> None:
    assert harness.attempt_load() is LoadOutcome.LOADED
    harness.ready()


# How a harness moves along its normal life, one public call per state; UNLOADING is only
# seen from inside unload(), so parked_in() holds unload() on another thread to get there.
_LIFECYCLE: list[tuple[HarnessState, Callable[[LoaderHarness], None]]] = [
    (S.LOAD_REQUESTED, LoaderHarness.load_requested),
    (S.LOAD_APPROVED, LoaderHarness.load_approved),
    (S.LOADING, LoaderHarness.start_loading),
    (S.READY, _load_and_ready),
    (S.UNLOAD_REQUESTED, LoaderHarness.unload_requested),
    (S.QUIESCING, LoaderHarness.start_quiescing),
    (S.QUIESCED, LoaderHarness.done_quiescing),
    (S.DISABLED, LoaderHarness.unload),
]


def walk_to(harness: LoaderHarness, target: HarnessState) -> None:
    """Drives a NEW harness to ``target`` through public calls (not to UNLOADING)."""
    assert target is not S.UNLOADING, "use parked_in(S.UNLOADING)"
    if target is S.ERROR:
        harness.error_out(InternalError("driven to error by the test"))
        return
    for state, step in _LIFECYCLE:
        if harness.state is target:
            break
        step(harness)
        assert harness.state is state
    assert harness.state is target


@attrs.define
class Parked:
    """A harness held in one state, its loader, and how to let a held unload() finish."""

    harness: LoaderHarness
    loader: ScriptedLoader
    finish: Callable[[], BaseException | None]


@contextlib.contextmanager
def parked_in(state: HarnessState) -> Iterator[Parked]:
    """A fresh harness in ``state``; for UNLOADING, unload() is held on another thread."""
    loader = ScriptedLoader()
    harness = LoaderHarness(ID, loader, NO_WAIT)
    if state is not S.UNLOADING:
        walk_to(harness, state)
        yield Parked(harness, loader, lambda: None)
        return
    walk_to(harness, S.QUIESCED)
    entered, release = threading.Event(), threading.Event()
    failures: list[BaseException] = []

    def hold() -> None:
        entered.set()
        release.wait(TIMEOUT_S)

    def run_unload() -> None:
        try:
            harness.unload()
        except ServingError as error:
            failures.append(error)

    loader.during_unload = hold
    thread = threading.Thread(target=run_unload, name="held-unload")
    thread.start()

    def finish() -> BaseException | None:
        release.set()
        thread.join(TIMEOUT_S)
        assert not thread.is_alive(), "unload() did not return"
        return failures[0] if failures else None

    try:
        assert entered.wait(TIMEOUT_S), "unload() never reached the loader"
        assert harness.state is S.UNLOADING
        yield Parked(harness, loader, finish)
    finally:
        finish()


def _unload_seen_from_inside(parked: Parked) -> HarnessState:
    seen: list[HarnessState] = []
    parked.loader.during_unload = lambda: seen.append(parked.harness.state)
    parked.harness.unload()
    return seen[0]


def _finish_unload(parked: Parked) -> HarnessState:
    assert parked.finish() is None
    return parked.harness.state


def _after(call: Callable[[LoaderHarness], object]) -> Callable[[Parked], HarnessState]:
    def perform(parked: Parked) -> HarnessState:
        call(parked.harness)
        return parked.harness.state

    return perform


def _error_out(harness: LoaderHarness) -> None:
    harness.error_out(InternalError("failed by the test"))


_INTO: dict[HarnessState, Callable[[LoaderHarness], object]] = {
    S.LOAD_REQUESTED: LoaderHarness.load_requested,
    S.LOAD_APPROVED: LoaderHarness.load_approved,
    S.LOADING: LoaderHarness.start_loading,
    S.READY: LoaderHarness.ready,
    S.UNLOAD_REQUESTED: LoaderHarness.unload_requested,
    S.QUIESCING: LoaderHarness.start_quiescing,
    S.QUIESCED: LoaderHarness.done_quiescing,
    S.UNLOADING: LoaderHarness.unload,
    S.DISABLED: LoaderHarness.unload,
    S.ERROR: _error_out,
}
"""The public call whose job is to move a harness into each state (none moves into NEW)."""

# How each legal transition is performed; the returned state is the one the transition reached
# (QUIESCED → UNLOADING is seen from inside the loader's unload()).
LEGAL: dict[tuple[HarnessState, HarnessState], Callable[[Parked], HarnessState]] = {
    (S.NEW, S.LOAD_REQUESTED): _after(LoaderHarness.load_requested),
    (S.LOAD_REQUESTED, S.LOAD_APPROVED): _after(LoaderHarness.load_approved),
    (S.LOAD_APPROVED, S.LOADING): _after(LoaderHarness.start_loading),
    (S.LOADING, S.READY): _after(LoaderHarness.ready),
    (S.READY, S.UNLOAD_REQUESTED): _after(LoaderHarness.unload_requested),
    (S.UNLOAD_REQUESTED, S.QUIESCING): _after(LoaderHarness.start_quiescing),
    (S.QUIESCING, S.QUIESCED): _after(LoaderHarness.done_quiescing),
    (S.QUIESCED, S.UNLOADING): _unload_seen_from_inside,
    (S.UNLOADING, S.DISABLED): _finish_unload,
    **{(state, S.ERROR): _after(_error_out) for state in S if state not in (S.DISABLED, S.ERROR)},
}

# Unload from QUIESCED legally passes through UNLOADING; that it never jumps straight to
# DISABLED is pinned by test_unload_passes_through_unloading.
ILLEGAL = [
    (source, target)
    for source, target in itertools.product(S, S)
    if (source, target) not in ALLOWED_TRANSITIONS
    and target is not S.NEW
    and (source, target) != (S.QUIESCED, S.DISABLED)
]


def _pair_id(pair: tuple[HarnessState, HarnessState]) -> str:
    return f"{pair[0].name}->{pair[1].name}"


LEGAL_PAIRS = sorted(LEGAL, key=_pair_id)


def test_table_is_tf_servings_lifecycle() -> None:
    """ALLOWED_TRANSITIONS is the linear lifecycle plus any non-terminal state to ERROR."""
    assert set(LEGAL) == ALLOWED_TRANSITIONS


@pytest.mark.parametrize("pair", LEGAL_PAIRS, ids=_pair_id)
def test_legal_transition_is_performed(pair: tuple[HarnessState, HarnessState]) -> None:
    """Each legal (from, to) pair is performed by the public call that does it."""
    source, target = pair
    with parked_in(source) as parked:
        assert LEGAL[pair](parked) is target


@pytest.mark.parametrize("pair", ILLEGAL, ids=_pair_id)
def test_illegal_transition_is_rejected(pair: tuple[HarnessState, HarnessState]) -> None:
    """Each illegal (from, to) pair is rejected and leaves state and loader untouched."""
    source, target = pair
    with parked_in(source) as parked:
        calls = (parked.loader.load_calls, parked.loader.unload_calls)

        with pytest.raises((InternalError, FailedPreconditionError)):
            _INTO[target](parked.harness)

        assert parked.harness.state is source
        assert (parked.loader.load_calls, parked.loader.unload_calls) == calls


@pytest.mark.parametrize("source", [s for s in S if s is not S.NEW], ids=lambda s: s.name)
def test_nothing_moves_back_to_new(source: HarnessState) -> None:
    """No public call returns a harness that has left NEW to NEW."""
    for call in _INTO.values():
        with parked_in(source) as parked:
            with contextlib.suppress(InternalError, FailedPreconditionError):
                call(parked.harness)
            assert parked.harness.state is not S.NEW


def test_unload_passes_through_unloading() -> None:
    """unload() from QUIESCED goes to UNLOADING while the loader unloads, then to DISABLED."""
    with parked_in(S.QUIESCED) as parked:
        assert _unload_seen_from_inside(parked) is S.UNLOADING
        assert parked.harness.state is S.DISABLED


@pytest.mark.parametrize("source", [s for s in S if s is not S.LOADING], ids=lambda s: s.name)
def test_attempt_load_outside_loading_is_rejected(source: HarnessState) -> None:
    """attempt_load in any state but LOADING raises InternalError without calling load()."""
    with parked_in(source) as parked:
        calls = parked.loader.load_calls

        with pytest.raises(InternalError):
            parked.harness.attempt_load()

        assert parked.harness.state is source
        assert parked.loader.load_calls == calls


def test_duplicate_load_request_fails_precondition() -> None:
    """A second load_requested() is a FailedPreconditionError and keeps LOAD_REQUESTED."""
    harness = LoaderHarness(ID, ScriptedLoader())
    harness.load_requested()

    with pytest.raises(FailedPreconditionError, match="Duplicate load request"):
        harness.load_requested()

    assert harness.state is S.LOAD_REQUESTED


def test_unload_request_when_not_ready_fails_precondition() -> None:
    """unload_requested() on a version that is not READY is a FailedPreconditionError."""
    with (
        parked_in(S.LOADING) as parked,
        pytest.raises(FailedPreconditionError, match="not ready"),
    ):
        parked.harness.unload_requested()


def test_error_out_records_the_reason() -> None:
    """error_out moves to ERROR and keeps the given error as the harness's error."""
    harness = LoaderHarness(ID, ScriptedLoader())
    reason = UnavailableError("source vanished")
    assert harness.error is None

    harness.error_out(reason)

    assert harness.state is S.ERROR
    assert harness.error is reason


def loading_harness(loader: ScriptedLoader, retry: LoadRetryOptions) -> LoaderHarness:
    """A harness in LOADING, ready for attempt_load()."""
    harness = LoaderHarness(ID, loader, retry)
    walk_to(harness, S.LOADING)
    return harness


def attempt_until_settled(harness: LoaderHarness, max_attempts: int = 50) -> list[LoadOutcome]:
    """Calls attempt_load() while it answers RETRY; returns every outcome."""
    outcomes = [harness.attempt_load()]
    while outcomes[-1] is LoadOutcome.RETRY:
        assert len(outcomes) < max_attempts, "attempt_load never settled"
        outcomes.append(harness.attempt_load())
    return outcomes


@pytest.mark.parametrize("retries", [0, 1, 3])
def test_retries_make_n_plus_one_attempts_then_error(retries: int) -> None:
    """With max_num_load_retries N, N+1 failed attempts end in ERROR with the last error."""
    failures = [UnavailableError(f"attempt {i} failed") for i in range(1, retries + 2)]
    loader = ScriptedLoader([*failures, None])
    harness = loading_harness(loader, LoadRetryOptions(max_num_load_retries=retries))

    outcomes = attempt_until_settled(harness)

    assert outcomes == [LoadOutcome.RETRY] * retries + [LoadOutcome.FAILED]
    assert loader.load_calls == retries + 1
    assert harness.load_attempts == retries + 1
    assert harness.state is S.ERROR
    assert harness.error is not None
    assert harness.error.message == f"attempt {retries + 1} failed"


def test_success_after_failures_loads_then_ready() -> None:
    """A load that fails twice then succeeds answers LOADED, stays LOADING until ready()."""
    loader = ScriptedLoader([UnavailableError("busy"), UnavailableError("busy"), None])
    harness = loading_harness(loader, LoadRetryOptions(max_num_load_retries=5))

    outcomes = attempt_until_settled(harness)

    assert outcomes == [LoadOutcome.RETRY, LoadOutcome.RETRY, LoadOutcome.LOADED]
    loaded_state = harness.state
    harness.ready()
    assert (loaded_state, harness.state) == (S.LOADING, S.READY)
    assert harness.error is None
    assert loader.load_calls == 3


def test_permanent_error_is_not_retried_by_default() -> None:
    """A DataLossError fails at once under the default retry_unless_permanent predicate."""
    corrupt = DataLossError("checkpoint is corrupt")
    loader = ScriptedLoader([corrupt, None])
    harness = loading_harness(loader, LoadRetryOptions(max_num_load_retries=5))

    assert attempt_until_settled(harness) == [LoadOutcome.FAILED]
    assert loader.load_calls == 1
    assert harness.error is corrupt


def test_should_retry_sees_each_wrapped_failure() -> None:
    """A custom should_retry gets every failure as a ServingError and can stop retries."""
    seen: list[ServingError] = []

    def retry_once(error: ServingError) -> bool:
        seen.append(error)
        return len(seen) < 2

    loader = ScriptedLoader([OSError("disk hiccup"), OSError("disk hiccup"), None])
    harness = loading_harness(
        loader, LoadRetryOptions(max_num_load_retries=5, should_retry=retry_once)
    )

    assert attempt_until_settled(harness) == [LoadOutcome.RETRY, LoadOutcome.FAILED]
    assert [error.code for error in seen] == [StatusCode.UNKNOWN, StatusCode.UNKNOWN]
    assert harness.state is S.ERROR


@pytest.mark.parametrize("code", [c for c in StatusCode if c is not StatusCode.OK], ids=str)
def test_retry_unless_permanent(code: StatusCode) -> None:
    """The default predicate refuses to retry exactly the codes a retry cannot heal."""
    permanent = {
        StatusCode.INVALID_ARGUMENT,
        StatusCode.DATA_LOSS,
        StatusCode.FAILED_PRECONDITION,
        StatusCode.UNIMPLEMENTED,
        StatusCode.RESOURCE_EXHAUSTED,
    }
    assert retry_unless_permanent(ServingError.from_code(code, "x")) is (code not in permanent)


def test_cancelled_retry_fails_with_cancelled_without_loading() -> None:
    """After cancel_load_retry, the pending retry fails CANCELLED and load() is not called."""
    loader = ScriptedLoader([UnavailableError("busy"), None])
    harness = loading_harness(loader, LoadRetryOptions(max_num_load_retries=5))
    assert harness.attempt_load() is LoadOutcome.RETRY

    harness.cancel_load_retry()

    assert harness.retry_cancelled
    assert harness.attempt_load() is LoadOutcome.FAILED
    assert loader.load_calls == 1
    assert harness.state is S.ERROR
    assert isinstance(harness.error, CancelledError)
    assert harness.error.code is StatusCode.CANCELLED


def test_cancel_before_the_first_attempt_still_loads_once() -> None:
    """Only retries are cancelled: the first attempt runs, and its failure is final."""
    busy = UnavailableError("busy")
    loader = ScriptedLoader([busy, None])
    harness = loading_harness(loader, LoadRetryOptions(max_num_load_retries=5))

    harness.cancel_load_retry()

    assert harness.attempt_load() is LoadOutcome.FAILED
    assert loader.load_calls == 1
    assert harness.error is busy


def test_cancel_during_a_failing_attempt_fails_with_its_error() -> None:
    """A retry cancelled while load() runs turns that attempt's failure into FAILED."""
    busy = UnavailableError("busy")
    loader = ScriptedLoader([busy, None])
    harness = loading_harness(loader, LoadRetryOptions(max_num_load_retries=5))
    loader.during_load = harness.cancel_load_retry

    assert harness.attempt_load() is LoadOutcome.FAILED
    assert harness.error is busy


def test_foreign_exception_from_load_is_wrapped_as_unknown() -> None:
    """A non-ServingError from load() becomes UNKNOWN naming the servable, chained to the cause."""
    boom = RuntimeError("boom")
    harness = loading_harness(ScriptedLoader([boom]), NO_WAIT)

    assert harness.attempt_load() is LoadOutcome.FAILED

    assert isinstance(harness.error, UnknownError)
    assert str(ID) in harness.error.message
    assert "RuntimeError: boom" in harness.error.message
    assert harness.error.__cause__ is boom


def test_unload_calls_the_loader_and_ends_disabled() -> None:
    """unload() from QUIESCED calls the loader's unload() once and ends DISABLED."""
    with parked_in(S.QUIESCED) as parked:
        parked.harness.unload()

        assert parked.loader.unload_calls == 1
        assert parked.harness.state is S.DISABLED


def test_unload_ends_disabled_even_if_the_loader_raises() -> None:
    """An exception from the loader's unload() is logged and the harness still ends DISABLED."""
    loader = ScriptedLoader(unload_error=RuntimeError("leaked a file handle"))
    harness = LoaderHarness(ID, loader, NO_WAIT)
    walk_to(harness, S.QUIESCED)

    harness.unload()

    assert loader.unload_calls == 1
    assert harness.state is S.DISABLED
    assert harness.error is None


def test_retry_options_defaults_and_validation() -> None:
    """LoadRetryOptions defaults to 5 retries 60 s apart and rejects negative values."""
    options = LoadRetryOptions()
    assert options.max_num_load_retries == 5
    assert options.load_retry_interval_s == 60.0
    assert options.should_retry is retry_unless_permanent
    with pytest.raises(ValueError, match="max_num_load_retries"):
        LoadRetryOptions(max_num_load_retries=-1)
    with pytest.raises(ValueError, match="load_retry_interval_s"):
        LoadRetryOptions(load_retry_interval_s=-0.5)


def test_each_failed_attempt_logs_the_retry_schedule(caplog: pytest.LogCaptureFixture) -> None:
    """Every failed attempt says which retry comes and when; the last says no more retries."""
    loader = ScriptedLoader([UnavailableError("disk busy")] * 3)
    harness = loading_harness(
        loader, LoadRetryOptions(max_num_load_retries=2, load_retry_interval_s=60)
    )
    with caplog.at_level("WARNING", logger="servinglib.core.loader_harness"):
        attempt_until_settled(harness)
    failed = f"Loading servable {ID} failed: disk busy"
    assert [r.getMessage() for r in caplog.records] == [
        f"{failed}; retry 1 of 2 in 60 s",
        f"{failed}; retry 2 of 2 in 60 s",
        f"{failed}; no more retries (3 attempts, max_num_load_retries=2)",
    ]


@pytest.mark.parametrize(
    ("retry", "errors", "last_line"),
    [
        (
            LoadRetryOptions(0),
            [UnavailableError("x")],
            "no more retries (1 attempt, max_num_load_retries=0)",
        ),
        (LoadRetryOptions(5), [DataLossError("x")], "no more retries (DATA_LOSS is not retried)"),
    ],
    ids=["no-retries", "permanent"],
)
def test_a_load_that_is_not_retried_says_why(
    caplog: pytest.LogCaptureFixture,
    retry: LoadRetryOptions,
    errors: list[ServingError],
    last_line: str,
) -> None:
    """A load failing without retries logs one line saying why none come."""
    harness = loading_harness(ScriptedLoader(errors), retry)
    with caplog.at_level("WARNING", logger="servinglib.core.loader_harness"):
        assert attempt_until_settled(harness) == [LoadOutcome.FAILED]
    assert [r.getMessage() for r in caplog.records] == [
        f"Loading servable {ID} failed: x; {last_line}"
    ]
