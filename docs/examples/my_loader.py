"""A Loader for a vocabulary file, and a request handler using it (docs/guides/writing-a-loader.md).

Tested by test_my_loader.py next to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from servinglib import Loader, Manager, ResourceAllocation, ServableRequest
from servinglib.errors import (
    DataLossError,
    FailedPreconditionError,
    ResourceExhaustedError,
    UnavailableError,
)


class VocabularyLoader(Loader):
    """Loads a UTF-8 file of whitespace-separated words into a mapping word → position.

    ``max_bytes`` caps the file's size and is the resource estimate, so the estimate is
    known without reading the file and never changes.
    Thread safety: as Loader requires (the manager never runs load and unload at once).
    """

    def __init__(self, path: Path, max_bytes: int) -> None:
        self._path = path
        self._max_bytes = max_bytes
        self._vocabulary: dict[str, int] | None = None

    def estimate_resources(self) -> ResourceAllocation:
        return ResourceAllocation.ram_bytes(self._max_bytes)

    def load(self) -> None:
        try:
            raw = self._path.read_bytes()
        except FileNotFoundError as exc:
            # May heal (the file is still being copied): UNAVAILABLE is retried.
            raise UnavailableError(f"{self._path} does not exist (yet)") from exc
        if len(raw) > self._max_bytes:
            # The estimate would be a lie: RESOURCE_EXHAUSTED is not retried.
            raise ResourceExhaustedError(
                f"{self._path} has {len(raw)} bytes, more than its estimate of {self._max_bytes}"
            )
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            # A corrupt file cannot heal: DATA_LOSS is not retried.
            raise DataLossError(f"{self._path} is not UTF-8: {exc}") from exc
        # Assigned last: a failed load leaves nothing behind.
        self._vocabulary = {word: position for position, word in enumerate(text.split())}

    def unload(self) -> None:
        self._vocabulary = None

    def servable(self) -> Mapping[str, int]:
        if self._vocabulary is None:
            raise FailedPreconditionError("VocabularyLoader.servable() called while not loaded")
        return self._vocabulary


def word_id(manager: Manager, name: str, word: str) -> int:
    """The position of ``word`` in the latest available version of vocabulary ``name``.

    Raises NotFoundError or UnavailableError (from the manager) and KeyError (unknown word).
    """
    with manager.servable_handle(ServableRequest.latest(name)) as handle:
        vocabulary: Mapping[str, int] = handle.servable
        return vocabulary[word]
