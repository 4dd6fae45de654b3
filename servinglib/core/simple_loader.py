"""SimpleLoader: a Loader from a creator function and a resource estimate."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar, final

from servinglib.core.loader import Loader
from servinglib.core.resources import ResourceAllocation
from servinglib.errors import FailedPreconditionError

T = TypeVar("T")


@final
class SimpleLoader(Loader, Generic[T]):
    """A Loader whose load() calls ``creator()`` and whose unload() drops the result.

    ``resource_estimate`` is an allocation or a function returning one (called
    on every estimate; it must never increase).  ``on_unload`` optionally
    releases the servable (close files, free caches) before it is dropped.
    Thread safety: as :class:`Loader` requires.
    """

    def __init__(
        self,
        creator: Callable[[], T],
        resource_estimate: ResourceAllocation | Callable[[], ResourceAllocation] | None = None,
        on_unload: Callable[[T], None] | None = None,
    ) -> None:
        self._creator = creator
        self._estimate = (
            resource_estimate if resource_estimate is not None else ResourceAllocation()
        )
        self._on_unload = on_unload
        self._servable: T | None = None
        self._loaded = False

    def estimate_resources(self) -> ResourceAllocation:
        if callable(self._estimate):
            return self._estimate()
        return self._estimate

    def load(self) -> None:
        self._servable = self._creator()
        self._loaded = True

    def unload(self) -> None:
        servable, loaded = self._servable, self._loaded
        self._servable, self._loaded = None, False
        if self._on_unload is not None and loaded:
            self._on_unload(servable)  # type: ignore[arg-type]

    def servable(self) -> T:
        if not self._loaded:
            raise FailedPreconditionError("SimpleLoader.servable() called while not loaded")
        return self._servable  # type: ignore[return-value]
