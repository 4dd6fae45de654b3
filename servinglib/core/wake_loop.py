"""WakeLoop: a background thread that runs a step each time it is woken, and after a timeout."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import final

_log = logging.getLogger(__name__)


@final
class WakeLoop:
    """Runs ``step()`` on a daemon thread named ``name`` whenever woken, until stopped.

    The manager's manage-state thread, the file-system source's polling
    thread and the config-file watcher are each one.  ``step()`` returns
    how long to wait before it runs again unless woken sooner (None: until
    woken; 0: at once).  The first step runs after ``first_wait_s`` (None:
    once woken).  Wakes that arrive while a step runs make the next step
    run at once; several wakes before a step are one.  A step that raises
    is logged (``what`` names the loop) and the loop goes on, waiting
    ``after_error_s`` (None: until woken).
    Thread-safe: :meth:`wake` and :meth:`stop` may be called from any
    thread, also from within ``step`` (stop then does not join).
    """

    def __init__(
        self,
        name: str,
        step: Callable[[], float | None],
        *,
        what: str,
        first_wait_s: float | None = None,
        after_error_s: float | None = None,
    ) -> None:
        self._step = step
        self._what = what
        self._first_wait_s = first_wait_s
        self._after_error_s = after_error_s
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        """Starts the thread.  Requires: called once."""
        self._thread.start()

    @property
    def running(self) -> bool:
        """True while the thread runs."""
        return self._thread.is_alive()

    def wake(self) -> None:
        """Has the step run as soon as the thread is free."""
        self._wake.set()

    def stop(self) -> None:
        """Stops the loop after the step running now, and waits for the thread; idempotent."""
        self._stopped.set()
        self._wake.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join()

    def _run(self) -> None:
        wait_s = self._first_wait_s
        while True:
            self._wake.wait(wait_s)
            self._wake.clear()
            if self._stopped.is_set():
                return
            try:
                wait_s = self._step()
            except Exception:  # noqa: BLE001 - the loop must outlive one failed step
                _log.exception("%s failed; going on", self._what)
                wait_s = self._after_error_s
