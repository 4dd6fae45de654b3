"""LoaderHarness: one servable version's state machine around its Loader."""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable
from typing import Any, final

import attrs

from servinglib.core.loader import Loader
from servinglib.core.servable_id import ServableId
from servinglib.errors import (
    CancelledError,
    FailedPreconditionError,
    InternalError,
    ServingError,
    StatusCode,
)

_log = logging.getLogger(__name__)


@final
class HarnessState(enum.Enum):
    """Where a servable version is in its life (TF Serving's ``LoaderHarness::State``)."""

    NEW = "new"
    LOAD_REQUESTED = "load-requested"
    LOAD_APPROVED = "load-approved"
    LOADING = "loading"
    READY = "ready"
    UNLOAD_REQUESTED = "unload-requested"
    QUIESCING = "quiescing"
    QUIESCED = "quiesced"
    UNLOADING = "unloading"
    DISABLED = "disabled"
    ERROR = "error"

    def __str__(self) -> str:
        return self.value


_S = HarnessState
_NON_TERMINAL = frozenset(_S) - {_S.DISABLED, _S.ERROR}

ALLOWED_TRANSITIONS: frozenset[tuple[HarnessState, HarnessState]] = frozenset(
    {
        (_S.NEW, _S.LOAD_REQUESTED),
        (_S.LOAD_REQUESTED, _S.LOAD_APPROVED),
        (_S.LOAD_APPROVED, _S.LOADING),
        (_S.LOADING, _S.READY),
        (_S.READY, _S.UNLOAD_REQUESTED),
        (_S.UNLOAD_REQUESTED, _S.QUIESCING),
        (_S.QUIESCING, _S.QUIESCED),
        (_S.QUIESCED, _S.UNLOADING),
        (_S.UNLOADING, _S.DISABLED),
    }
    | {(state, _S.ERROR) for state in _NON_TERMINAL}
)
"""Every legal (from, to) pair; any state but the two terminal ones may go to ERROR."""

# Codes a retry cannot heal: the model's files are corrupt or unparsable, its
# signatures invalid, or the request itself was wrong.
_PERMANENT_CODES = frozenset(
    {
        StatusCode.INVALID_ARGUMENT,
        StatusCode.DATA_LOSS,
        StatusCode.FAILED_PRECONDITION,
        StatusCode.UNIMPLEMENTED,
        StatusCode.RESOURCE_EXHAUSTED,
    }
)


def _attempts(count: int) -> str:
    return "1 attempt" if count == 1 else f"{count} attempts"


def retry_unless_permanent(error: ServingError) -> bool:
    """The default should-retry predicate: retry unless the error cannot heal.

    Errors with codes INVALID_ARGUMENT, DATA_LOSS, FAILED_PRECONDITION,
    UNIMPLEMENTED or RESOURCE_EXHAUSTED are not retried; anything else
    (including foreign exceptions, wrapped as UNKNOWN) is.
    """
    return error.code not in _PERMANENT_CODES


@final
@attrs.frozen
class LoadRetryOptions:
    """How often and when a failed load is tried again.

    ``max_num_load_retries`` N means up to N+1 attempts, ``load_retry_interval_s``
    apart; ``should_retry`` sees each failure and may stop the retries
    (TF Serving's ``should_retry_model_load``).  Immutable, so thread-safe.
    """

    max_num_load_retries: int = attrs.field(default=5, validator=attrs.validators.ge(0))
    load_retry_interval_s: float = attrs.field(default=60.0, validator=attrs.validators.ge(0))
    should_retry: Callable[[ServingError], bool] = retry_unless_permanent


@final
class LoadOutcome(enum.Enum):
    """What one load attempt left behind."""

    LOADED = "loaded"
    RETRY = "retry"
    FAILED = "failed"


@final
class LoaderHarness:
    """Owns a Loader and walks it through :class:`HarnessState` by the legal transitions.

    Every state change goes through one function that rejects illegal
    transitions with an InternalError (and leaves the state as it was).  Load
    retries are driven from outside, one :meth:`attempt_load` at a time, so a
    retry's wait never occupies a thread.
    Thread-safe: transitions are serialized by an internal lock; :attr:`state`
    is readable without it.
    """

    def __init__(
        self,
        servable_id: ServableId,
        loader: Loader | None,
        retry: LoadRetryOptions | None = None,
        additional_state: Any = None,  # noqa: ANN401 - owned by the harness's manager
    ) -> None:
        self.id = servable_id
        self.loader = loader
        self.retry = retry if retry is not None else LoadRetryOptions()
        self.additional_state = additional_state
        self._lock = threading.Lock()
        self._state = HarnessState.NEW  # guarded by: _lock (writes)
        self._error: ServingError | None = None  # guarded by: _lock (writes)
        self._attempts = 0  # guarded by: _lock
        self._retry_cancelled = False  # guarded by: _lock (writes)

    def __repr__(self) -> str:
        return f"LoaderHarness({self.id}, {self._state})"

    @property
    def state(self) -> HarnessState:
        """The current state (a snapshot: it may change right after)."""
        return self._state

    @property
    def error(self) -> ServingError | None:
        """Why the harness is in ERROR, or None."""
        return self._error

    @property
    def load_attempts(self) -> int:
        """How many times load() has been called."""
        return self._attempts

    def load_requested(self) -> None:
        """NEW → LOAD_REQUESTED; a second request is a FailedPreconditionError."""
        with self._lock:
            if self._state is not HarnessState.NEW:
                raise FailedPreconditionError(f"Duplicate load request for servable {self.id}")
            self._transition_locked(HarnessState.NEW, HarnessState.LOAD_REQUESTED)

    def load_approved(self) -> None:
        """LOAD_REQUESTED → LOAD_APPROVED (resources reserved)."""
        self._transition(HarnessState.LOAD_REQUESTED, HarnessState.LOAD_APPROVED)

    def start_loading(self) -> None:
        """LOAD_APPROVED → LOADING, before the first attempt."""
        self._transition(HarnessState.LOAD_APPROVED, HarnessState.LOADING)

    def attempt_load(self) -> LoadOutcome:
        """Calls the loader's load() once: LOADED, RETRY (call again later) or FAILED.

        Requires: state LOADING.  On LOADED the state stays LOADING until
        :meth:`ready` (so the caller can publish the servable first); on FAILED
        the harness is in ERROR with the last error.  A cancelled retry fails
        with CANCELLED without calling load().
        """
        with self._lock:
            if self._state is not HarnessState.LOADING:
                raise InternalError(f"attempt_load on servable {self.id} in state {self._state}")
            if self._retry_cancelled and self._attempts > 0:
                self._fail_locked(CancelledError(f"Loading of servable {self.id} cancelled"))
                return LoadOutcome.FAILED
            self._attempts += 1
            attempt = self._attempts
        assert self.loader is not None
        try:
            self.loader.load()
        except Exception as exc:  # noqa: BLE001 - a loader may raise anything; it becomes the servable's health
            error = ServingError.wrap(exc, f"Loading servable {self.id} failed")
        else:
            return LoadOutcome.LOADED
        retries = self.retry.max_num_load_retries
        failed = error.message
        if str(self.id) not in failed:  # a ServingError raised by the loader names no servable
            failed = f"Loading servable {self.id} failed: {failed}"
        with self._lock:
            if attempt > retries:
                why = f"no more retries ({_attempts(attempt)}, max_num_load_retries={retries})"
            elif self._retry_cancelled:
                why = "no more retries (cancelled: the version is no longer wanted)"
            elif not self.retry.should_retry(error):
                why = f"no more retries ({error.code.name} is not retried)"
            else:
                _log.warning(
                    "%s; retry %d of %d in %g s",
                    failed,
                    attempt,
                    retries,
                    self.retry.load_retry_interval_s,
                )
                return LoadOutcome.RETRY
            self._fail_locked(error)
        _log.warning("%s; %s", failed, why)
        return LoadOutcome.FAILED

    def ready(self) -> None:
        """LOADING → READY, once the loaded servable is being served."""
        self._transition(HarnessState.LOADING, HarnessState.READY)

    def cancel_load_retry(self) -> None:
        """Stops further load retries; a pending retry then fails with CANCELLED.

        Thread safety: any thread.
        """
        with self._lock:
            self._retry_cancelled = True

    @property
    def retry_cancelled(self) -> bool:
        """Whether :meth:`cancel_load_retry` was called."""
        return self._retry_cancelled

    def unload_requested(self) -> None:
        """READY → UNLOAD_REQUESTED; anything else is a FailedPreconditionError."""
        with self._lock:
            if self._state is not HarnessState.READY:
                raise FailedPreconditionError(
                    f"Servable {self.id} cannot be unloaded: it is {self._state}, not ready"
                )
            self._transition_locked(HarnessState.READY, HarnessState.UNLOAD_REQUESTED)

    def start_quiescing(self) -> None:
        """UNLOAD_REQUESTED → QUIESCING: the version is about to stop being served."""
        self._transition(HarnessState.UNLOAD_REQUESTED, HarnessState.QUIESCING)

    def done_quiescing(self) -> None:
        """QUIESCING → QUIESCED: no handle to the version is left."""
        self._transition(HarnessState.QUIESCING, HarnessState.QUIESCED)

    def unload(self) -> None:
        """QUIESCED → UNLOADING, calls the loader's unload(), → DISABLED."""
        self._transition(HarnessState.QUIESCED, HarnessState.UNLOADING)
        assert self.loader is not None
        try:
            self.loader.unload()
        except Exception:  # noqa: BLE001 - an unload failure must not wedge the harness
            _log.exception("unload of servable %s raised; ignored", self.id)
        self._transition(HarnessState.UNLOADING, HarnessState.DISABLED)

    def error_out(self, error: ServingError) -> None:
        """Any non-terminal state → ERROR with ``error`` as the reason."""
        with self._lock:
            self._fail_locked(error)

    def _fail_locked(self, error: ServingError) -> None:
        self._transition_locked(self._state, HarnessState.ERROR)
        self._error = error

    def _transition(self, expected: HarnessState, target: HarnessState) -> None:
        with self._lock:
            self._transition_locked(expected, target)

    def _transition_locked(self, expected: HarnessState, target: HarnessState) -> None:
        """The one place the state changes; rejects illegal transitions."""
        if self._state is not expected or (expected, target) not in ALLOWED_TRANSITIONS:
            raise InternalError(
                f"Illegal transition of servable {self.id} from {self._state} to {target}"
                + ("" if self._state is expected else f" (expected to be {expected})")
            )
        self._state = target
