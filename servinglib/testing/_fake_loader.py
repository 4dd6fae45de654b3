"""FakeLoader: a Loader whose behaviour a test scripts."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import Any, final

from servinglib.core.loader import Loader
from servinglib.core.resources import ResourceAllocation
from servinglib.errors import FailedPreconditionError


@final
class LiveCounter:
    """Counts FakeLoaders that are loaded and not yet unloaded.  Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live = 0  # guarded by: _lock
        self._peak = 0  # guarded by: _lock

    @property
    def live(self) -> int:
        """Loaded and not unloaded now."""
        return self._live

    @property
    def peak(self) -> int:
        """The most ever live at once."""
        return self._peak

    def _change(self, delta: int) -> None:
        with self._lock:
            self._live += delta
            self._peak = max(self._peak, self._live)


@final
class FakeLoader(Loader):
    """A Loader for tests: serves ``servable``, fails or blocks as told, counts its calls.

    ``load_errors``: exceptions raised by the first load() calls, in order
    (then loads succeed); ``load_error``: raised by every load().
    ``load_gate``: load() blocks until the event is set (deterministic "slow
    load"); ``load_delay_s``: load() sleeps that long (for demos and benchmarks).
    ``live_counter``: shared count of loaded instances (e.g. to assert that an
    availability-preserving swap held two, a resource-preserving one one).
    Thread-safe.
    """

    def __init__(
        self,
        servable: Any = None,  # noqa: ANN401 - whatever the test serves
        *,
        resource_estimate: ResourceAllocation | None = None,
        load_error: BaseException | None = None,
        load_errors: Iterable[BaseException] = (),
        load_gate: threading.Event | None = None,
        load_delay_s: float = 0.0,
        unload_gate: threading.Event | None = None,
        live_counter: LiveCounter | None = None,
    ) -> None:
        self._servable = servable if servable is not None else object()
        self._estimate = (
            resource_estimate if resource_estimate is not None else ResourceAllocation()
        )
        self._load_error = load_error
        self._load_errors = list(load_errors)
        self._load_gate = load_gate
        self._load_delay_s = load_delay_s
        self._unload_gate = unload_gate
        self._counter = live_counter
        self._lock = threading.Lock()
        self.load_calls = 0  # guarded by: _lock
        self.unload_calls = 0  # guarded by: _lock
        self.loaded = False  # guarded by: _lock
        self.load_started = threading.Event()
        self.unload_started = threading.Event()

    def estimate_resources(self) -> ResourceAllocation:
        return self._estimate

    def load(self) -> None:
        with self._lock:
            self.load_calls += 1
            scripted = self._load_errors.pop(0) if self._load_errors else None
        self.load_started.set()
        if self._load_gate is not None:
            self._load_gate.wait()
        if self._load_delay_s:
            time.sleep(self._load_delay_s)
        error = scripted if scripted is not None else self._load_error
        if error is not None:
            raise error
        with self._lock:
            self.loaded = True
        if self._counter is not None:
            self._counter._change(+1)  # noqa: SLF001 - the counter's owner module

    def unload(self) -> None:
        self.unload_started.set()
        if self._unload_gate is not None:
            self._unload_gate.wait()
        with self._lock:
            self.unload_calls += 1
            was_loaded, self.loaded = self.loaded, False
        if was_loaded and self._counter is not None:
            self._counter._change(-1)  # noqa: SLF001 - the counter's owner module

    def servable(self) -> Any:  # noqa: ANN401 - whatever the test serves
        if not self.loaded:
            raise FailedPreconditionError("FakeLoader.servable() called while not loaded")
        return self._servable
