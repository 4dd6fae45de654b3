"""SourceAdapter: a Target of one item type that is a Source of another."""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar, final

from servinglib.core.argument_types import check_servable_data
from servinglib.core.servable_data import ServableData
from servinglib.errors import ServingError
from servinglib.sources.source import Source
from servinglib.sources.target import TargetBase

In = TypeVar("In")
Out = TypeVar("Out")


class SourceAdapter(TargetBase[In], Source[Out], Generic[In, Out]):
    """Converts each aspired-versions set it receives and emits the result downstream.

    E.g. ``SourceAdapter[StoragePath, Loader]`` turns version directories
    into loaders for a manager.
    Thread-safe if :meth:`adapt` is.
    """

    def set_aspired_versions(
        self, servable_name: str, versions: Sequence[ServableData[In]]
    ) -> None:
        for item in versions:
            check_servable_data(item, f"{type(self).__name__}.set_aspired_versions()")
        self.emit_aspired_versions(servable_name, self.adapt(servable_name, versions))

    @abc.abstractmethod
    def adapt(
        self, servable_name: str, versions: Sequence[ServableData[In]]
    ) -> list[ServableData[Out]]:
        """The converted set.

        Important: must keep every id (a version that cannot be converted
        becomes an item with an error, so the manager records the failure),
        and must not raise.
        """


class UnarySourceAdapter(SourceAdapter[In, Out], Generic[In, Out]):
    """A SourceAdapter that converts each item on its own with :meth:`convert`.

    Items that arrive as errors pass through; an exception from convert()
    becomes that item's error.
    """

    def adapt(
        self, servable_name: str, versions: Sequence[ServableData[In]]
    ) -> list[ServableData[Out]]:
        return [self._convert_one(item) for item in versions]

    def _convert_one(self, item: ServableData[In]) -> ServableData[Out]:
        if item.error is not None:
            return item.with_error(item.error)
        try:
            return item.with_data(self.convert(item.id.name, item.data))
        except Exception as exc:  # noqa: BLE001 - a failed conversion becomes the version's error
            return item.with_error(ServingError.wrap(exc, f"Preparing servable {item.id} failed"))

    @abc.abstractmethod
    def convert(self, servable_name: str, data: In) -> Out:
        """Converts one item's data (e.g. a version directory into a Loader).

        Raise a ServingError to say why it cannot be converted.
        """


@final
class FunctionSourceAdapter(UnarySourceAdapter[In, Out], Generic[In, Out]):
    """A UnarySourceAdapter whose conversion is a function of the item's data.

    E.g. ``FunctionSourceAdapter(MyLoader)`` turns each version directory
    into ``MyLoader(path)``.  Thread-safe if ``convert`` is.
    """

    def __init__(self, convert: Callable[[In], Out]) -> None:
        super().__init__()
        self._convert = convert

    def convert(self, servable_name: str, data: In) -> Out:
        return self._convert(data)


@final
class ErrorInjectingSourceAdapter(SourceAdapter[In, Out], Generic[In, Out]):
    """Turns every item into ``error``: the adapter for servables nothing can load.

    E.g. routed to by servables whose platform is unknown, so each version
    ends in error with a message saying why.  Thread-safe.
    """

    def __init__(self, error: ServingError) -> None:
        super().__init__()
        self._error = error

    def adapt(
        self, servable_name: str, versions: Sequence[ServableData[In]]
    ) -> list[ServableData[Out]]:
        return [item.with_error(self._error) for item in versions]
