"""ModelLoader: the Loader of one model version directory that serves a Servable."""

from __future__ import annotations

import abc
import os
import threading
from collections.abc import Callable

from servinglib.core.loader import Loader
from servinglib.core.resources import ResourceAllocation
from servinglib.errors import FailedPreconditionError, PermissionDeniedError
from servinglib.loaders.warmup import WarmupOptions, run_warmup
from servinglib.servable import Servable

RAM_ESTIMATE_FACTOR = 1.2
"""A version's RAM estimate is its files' size times this (TF Serving's rule)."""

ServableWrapper = Callable[[Servable, str], Servable]
"""``wrapper(servable, version_path)`` → the servable to serve instead (e.g. batching)."""


class ModelLoader(Loader):
    """Loads the Servable of one version directory, warms it up, and serves it.

    Subclasses implement :meth:`_load_servable` (and :meth:`_unload_servable`).
    load() wraps the servable if a wrapper was set (:meth:`wrap_servable_with`),
    then replays the directory's warmup requests through it, so a version is
    AVAILABLE only warmed up; a failed warmup unloads it and fails the load;
    a directory the server may not list or enter fails it with
    PERMISSION_DENIED.  unload() closes the served servable before
    :meth:`_unload_servable`.  The RAM estimate is the directory's size x 1.2.
    Thread safety: as :class:`Loader` requires.
    """

    def __init__(self, path: str, warmup: WarmupOptions | None = None) -> None:
        self.path = path
        self._warmup = warmup if warmup is not None else WarmupOptions()
        self._lock = threading.Lock()
        self._estimate: ResourceAllocation | None = None  # guarded by: _lock
        self._wrapper: ServableWrapper | None = None
        self._loaded: Servable | None = None  # what _load_servable returned
        self._servable: Servable | None = None  # what is served (wrapped or not)
        self.warmup_records = 0

    def wrap_servable_with(self, wrapper: ServableWrapper) -> None:
        """Serves ``wrapper(servable, path)`` instead of the loaded servable.

        Requires: called before load().
        """
        self._wrapper = wrapper

    def estimate_resources(self) -> ResourceAllocation:
        with self._lock:
            if self._estimate is None:
                size = _directory_size(self.path)
                self._estimate = ResourceAllocation.ram_bytes(int(size * RAM_ESTIMATE_FACTOR))
            return self._estimate

    def load(self) -> None:
        _check_readable(self.path)
        loaded = self._load_servable()
        served = loaded
        try:
            if self._wrapper is not None:
                served = self._wrapper(loaded, self.path)
            self.warmup_records = run_warmup(served, self.path, self._warmup)
        except BaseException:
            self._release(served, loaded)
            raise
        self._loaded, self._servable = loaded, served

    def unload(self) -> None:
        served, self._servable = self._servable, None
        loaded, self._loaded = self._loaded, None
        if served is not None and loaded is not None:
            self._release(served, loaded)

    def _release(self, served: Servable, loaded: Servable) -> None:
        try:
            if isinstance(served, Servable):  # (a wrapped custom Loader may serve any object)
                served.close()
        finally:
            self._unload_servable(loaded)

    def servable(self) -> Servable:
        if self._servable is None:
            raise FailedPreconditionError(f"The model at {self.path} is not loaded")
        return self._servable

    @classmethod
    def import_runtime(cls) -> None:
        """Imports what :meth:`load` needs (a model process runs this at idle priority, early).

        Default: nothing.  Override for a runtime that is slow to import.
        """

    def start_runtime(self) -> None:
        """Starts the threads the runtime runs calls on; after :meth:`import_runtime`.

        A model process (:class:`~servinglib.loaders.process.ProcessLoader`)
        runs this at normal priority and then :meth:`load` at idle priority,
        so threads a runtime starts here serve calls at normal priority.
        Default: nothing.
        """

    @abc.abstractmethod
    def _load_servable(self) -> Servable:
        """Loads the model in :attr:`path`; raise (a ServingError) if it cannot be loaded."""

    def _unload_servable(self, servable: Servable) -> None:
        """Releases what :meth:`_load_servable` acquired.  Default: nothing."""


def _check_readable(path: str) -> None:
    try:
        os.listdir(path)  # needs read permission
        os.stat(os.path.join(path, os.curdir))  # needs search permission
    except PermissionError as error:
        raise PermissionDeniedError(
            f"Cannot read model directory {path}: {error.strerror} (the server runs as uid "
            f"{os.geteuid()})"
        ) from None
    except OSError:  # missing, not a directory: the platform's load says what it lacks
        return


def _directory_size(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:  # vanished meanwhile: the estimate is an upper bound anyway
                continue
    return total
