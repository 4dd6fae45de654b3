"""StoreWork: what a remote base path's mirror is doing with its store, and how to stop it."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, final

from servinglib.errors import CancelledError


@final
class StoreWork:
    """The store work of one source (its mirrors share it), cancellable from any thread.

    Thread-safe.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cancelled = False  # guarded by: _lock
        self._running: set[concurrent.futures.Future[Any]] = set()  # guarded by: _lock
        # what → (started, monotonic clock; files done, of how many)
        self._doing: dict[str, tuple[float, int, int]] = {}  # guarded by: _lock

    @property
    def cancelled(self) -> bool:
        """True once :meth:`cancel` was called."""
        with self._lock:
            return self._cancelled

    def cancel(self) -> list[str]:
        """Ends the calls running and refuses later ones; returns :meth:`describe` before that.

        Idempotent.
        """
        with self._lock:
            self._cancelled = True
            running, self._running = self._running, set()
            doing = self._describe_locked()
        for future in running:
            future.cancel()
        return doing

    def describe(self) -> list[str]:
        """What is being done now, each with its progress and how long it has taken."""
        with self._lock:
            return self._describe_locked()

    @contextlib.contextmanager
    def doing(self, what: str, total: int = 0) -> Iterator[Callable[[], None]]:
        """Names ``what`` while the block runs; yields a function counting one of ``total`` done.

        Raises CancelledError at once if the work was cancelled already.
        """
        with self._lock:
            self._check_locked()
            self._doing[what] = (time.monotonic(), 0, total)

        def one_done() -> None:
            with self._lock:
                started, done, of = self._doing[what]
                self._doing[what] = (started, done + 1, of)

        try:
            yield one_done
        finally:
            with self._lock:
                del self._doing[what]

    def call(
        self,
        fs: Any,  # noqa: ANN401 - an fsspec file system
        method: str,
        *args: Any,  # noqa: ANN401 - the method's own arguments
        timeout_s: float | None = None,
        **kwargs: Any,  # noqa: ANN401 - the method's own arguments
    ) -> Any:  # noqa: ANN401 - what the method returns
        """``fs.<method>(*args, **kwargs)``, cancelled by :meth:`cancel`.

        An asynchronous file system's ``_<method>`` coroutine runs on its
        loop and is cancelled there (``timeout_s``: TimeoutError past it); a
        synchronous one's method runs as it is and cannot be cut short (only
        the next call is refused).  Raises CancelledError once cancelled.
        """
        if not getattr(fs, "async_impl", False):
            with self._lock:
                self._check_locked()
            return getattr(fs, method)(*args, **kwargs)
        coroutine: Coroutine[Any, Any, Any] = getattr(fs, f"_{method}")(*args, **kwargs)
        with self._lock:
            if self._cancelled:
                coroutine.close()
                self._check_locked()
            future = asyncio.run_coroutine_threadsafe(coroutine, fs.loop)
            self._running.add(future)
        try:
            return future.result(timeout_s)
        except concurrent.futures.CancelledError:
            raise CancelledError("The store work was cancelled: the source is closing") from None
        except TimeoutError:
            future.cancel()
            raise
        finally:
            with self._lock:
                self._running.discard(future)

    def _check_locked(self) -> None:
        if self._cancelled:
            raise CancelledError("The store work was cancelled: the source is closing")

    def _describe_locked(self) -> list[str]:
        now = time.monotonic()
        return [
            f"{what} ({done} of {total} files, {now - started:.1f} s)"
            if total
            else f"{what} ({now - started:.1f} s)"
            for what, (started, done, total) in self._doing.items()
        ]
