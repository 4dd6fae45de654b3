"""FakeStoragePathSourceAdapter: version directories → FakeLoaders (or loaders you make)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import final

from servinglib.core.loader import Loader
from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId
from servinglib.sources.source import StoragePath
from servinglib.sources.source_adapter import UnarySourceAdapter
from servinglib.testing._fake_loader import FakeLoader


@final
class FakeStoragePathSourceAdapter(UnarySourceAdapter[StoragePath, Loader]):
    """Turns each aspired version directory into ``loader_factory(path)``.

    The default factory is ``FakeLoader(path)``: a loader that serves the
    path itself, so a pipeline from a real source (e.g. the file-system
    source) can be tested without real models.  An exception from the
    factory becomes that version's error, as in every UnarySourceAdapter.
    :attr:`loaders` keeps the last loader made for each version.
    Thread-safe if the factory is.
    """

    def __init__(self, loader_factory: Callable[[StoragePath], Loader] | None = None) -> None:
        super().__init__()
        self._factory: Callable[[StoragePath], Loader] = (
            loader_factory if loader_factory is not None else FakeLoader
        )
        self._lock = threading.Lock()
        self._loaders: dict[ServableId, Loader] = {}  # guarded by: _lock

    def adapt(
        self, servable_name: str, versions: Sequence[ServableData[StoragePath]]
    ) -> list[ServableData[Loader]]:
        adapted = super().adapt(servable_name, versions)
        with self._lock:
            self._loaders.update((item.id, item.data) for item in adapted if item.ok)
        return adapted

    def convert(self, servable_name: str, data: StoragePath) -> Loader:
        return self._factory(data)

    @property
    def loaders(self) -> dict[ServableId, Loader]:
        """The last loader made for each version adapted so far (a copy)."""
        with self._lock:
            return dict(self._loaders)
