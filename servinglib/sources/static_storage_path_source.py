"""StaticStoragePathSource: one fixed servable version at a fixed path."""

from __future__ import annotations

from typing import final

from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId
from servinglib.sources.source import Source, StoragePath


@final
class StaticStoragePathSource(Source[StoragePath]):
    """Aspires exactly one version, ``path``, of ``servable_name``, once connected.

    For serving a single model directory that never changes.  Thread-safe.
    """

    def __init__(self, servable_name: str, version: int, path: StoragePath) -> None:
        super().__init__()
        self.id = ServableId(servable_name, version)
        self.emit_aspired_versions(servable_name, [ServableData.of(self.id, path)])
