"""ServableData: one item of an aspired-versions stream, data or error."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Generic, TypeAlias, TypeVar, final

import attrs

from servinglib.core.servable_id import ServableId
from servinglib.errors import ServingError

T = TypeVar("T")
U = TypeVar("U")


@final
@attrs.frozen
class ServableData(Generic[T]):
    """A servable id with either its data (a path, a Loader, ...) or the error met making it.

    Errors travel down the source → adapter → manager pipeline as data and
    end up as the servable's health; they never cross a thread as an exception.
    ``revision`` counts how often the source saw the version's content change
    after first offering it (0: never); adapters keep it, and a manager
    tries a version that failed again when it arrives with another revision.
    Immutable, so thread-safe (the data object itself may not be).
    """

    id: ServableId
    _data: T | None = attrs.field(alias="data", default=None)
    error: ServingError | None = None
    revision: int = 0

    def __attrs_post_init__(self) -> None:
        if self.error is not None and self._data is not None:
            raise ValueError("ServableData holds data or an error, not both")

    @classmethod
    def of(cls, servable_id: ServableId, data: T) -> ServableData[T]:
        """Data for ``servable_id``."""
        return cls(servable_id, data=data)

    @classmethod
    def failed(cls, servable_id: ServableId, error: ServingError) -> ServableData[T]:
        """An error in place of the data for ``servable_id``."""
        return cls(servable_id, error=error)

    @property
    def ok(self) -> bool:
        """True when this item holds data, not an error."""
        return self.error is None

    @property
    def data(self) -> T:
        """The data; raises the held error instead if there is one."""
        if self.error is not None:
            raise self.error
        return self._data  # type: ignore[return-value]

    def with_data(self, data: U) -> ServableData[U]:
        """The same id and revision carrying other data (an adapter's output)."""
        return ServableData(self.id, data=data, revision=self.revision)

    def with_error(self, error: ServingError) -> ServableData[U]:
        """The same id and revision carrying ``error`` (an adapter's failure)."""
        return ServableData(self.id, error=error, revision=self.revision)


AspiredVersionsCallback: TypeAlias = Callable[[str, Sequence[ServableData[T]]], None]
"""``callback(servable_name, versions)``: ``versions`` is the complete desired set for the name.

Versions left out are to be unloaded; an empty sequence unloads every version.
"""
