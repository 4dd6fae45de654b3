"""Target: receives aspired versions from a Source; connect() wires the two."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar

from servinglib.core.servable_data import AspiredVersionsCallback, ServableData
from servinglib.sources.source import Source

T = TypeVar("T")


class Target(Protocol[T]):
    """Anything that hands out an aspired-versions callback for items of type ``T``.

    :class:`servinglib.core.AspiredVersionsManager` is a ``Target[Loader]``;
    adapters and routers are targets of their input type.
    """

    def aspired_versions_callback(self) -> AspiredVersionsCallback[T]:
        """The callback a Source calls; stays callable (as a no-op) after the target closes."""
        ...


class TargetBase(abc.ABC, Generic[T]):
    """A Target whose callbacks forward to :meth:`set_aspired_versions` until :meth:`detach`.

    Thread-safe.
    """

    _detached = False

    def aspired_versions_callback(self) -> AspiredVersionsCallback[T]:
        def callback(servable_name: str, versions: Sequence[ServableData[T]]) -> None:
            if not self._detached:
                self.set_aspired_versions(servable_name, versions)

        return callback

    def detach(self) -> None:
        """Makes every callback handed out a no-op (for a target being closed)."""
        self._detached = True

    @abc.abstractmethod
    def set_aspired_versions(self, servable_name: str, versions: Sequence[ServableData[T]]) -> None:
        """Handles the complete aspired set of ``servable_name``.

        Thread safety: may be called from any thread.
        """


def connect(source: Source[T], target: Target[T]) -> None:
    """Makes ``target`` receive ``source``'s aspired versions.

    The item types must match: a ``Source[StoragePath]`` reaches a
    ``Target[Loader]`` only through a ``SourceAdapter[StoragePath, Loader]``
    (mypy rejects the direct connection).
    """
    source.set_aspired_versions_callback(target.aspired_versions_callback())
