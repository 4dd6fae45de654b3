"""ModelFileAdapter: each version directory to the model file a servable's platform loads."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import final

import attrs

from servinglib.sources.source import StoragePath
from servinglib.sources.source_adapter import UnarySourceAdapter
from servinglib.sources.version_check import VersionCheck, holds_a_file


@final
class ModelFileAdapter(UnarySourceAdapter[StoragePath, StoragePath]):
    """Passes version directories on, joined to their servable's model file if it has one.

    Triton's layout keeps a model in a file or directory of each version
    (``<version>/model.savedmodel/``): a servable given a ``model_filename``
    by :meth:`update` has ``<version>/<model_filename>`` loaded; the others
    their version directory, as TF Serving has it.
    Thread-safe: the mapping is replaced whole.
    """

    def __init__(self) -> None:
        super().__init__()
        self._filenames: Mapping[str, str] = {}  # replaced whole

    def update(self, filenames: Mapping[str, str]) -> None:
        """Servable name → the model file inside each of its versions, from now on."""
        self._filenames = {name: file for name, file in filenames.items() if file}

    def convert(self, servable_name: str, data: StoragePath) -> StoragePath:
        filename = self._filenames.get(servable_name)
        return os.path.join(data, filename) if filename else data


def check_inside(check: VersionCheck | None, model_filename: str) -> VersionCheck | None:
    """``check`` applied to ``<version>/<model_filename>`` instead of the version directory.

    Checks made of the same two compare equal (a servable's config is diffed by value).
    """
    if not model_filename:
        return check
    return _InsideCheck(check if check is not None else holds_a_file, model_filename)


@final
@attrs.frozen
class _InsideCheck:
    """A VersionCheck of the model file inside each version directory.  Immutable."""

    check: VersionCheck
    model_filename: str

    def __call__(self, version_dir: str) -> str | None:
        path = os.path.join(version_dir, self.model_filename)
        if not os.path.exists(path):
            return f"no {self.model_filename} yet"
        return self.check(path)
