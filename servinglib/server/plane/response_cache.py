"""ResponseCache: models' answers by request key, bounded by bytes, least recently used out."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, final

import attrs
import numpy as np
import numpy.typing as npt

Outputs = Mapping[str, npt.NDArray[Any]]

ENTRY_OVERHEAD_BYTES = 256
"""What each entry is charged beside its outputs' bytes (its key, dicts, array headers)."""
_TENSOR_OVERHEAD_BYTES = 112  # an ndarray object and its name, beside its data


@final
@attrs.frozen
class CacheUsage:
    """The cache's state at one moment; ``hits`` and ``misses`` by model.  Immutable."""

    size_bytes: int
    used_bytes: int
    entries: int
    evictions: int
    hits: Mapping[str, int]
    misses: Mapping[str, int]


@final
class ResponseCache:
    """Answers by key (a request's digest), holding at most ``size_bytes`` of them.

    An entry is charged its outputs' bytes (a string tensor's items' lengths)
    and :data:`ENTRY_OVERHEAD_BYTES`; an insertion evicts the least recently
    used entries until it fits, and an answer bigger than the whole cache is
    not stored, so no request can grow the cache past its bound.  Stored
    outputs are copies, read-only, so neither the model nor a reader can
    change an answer once cached.  Each model has a generation: :meth:`forget`
    drops the model's entries and starts a new one, and an insertion made
    with an older generation's token is refused (an answer of a version that
    was swapped out meanwhile).
    Thread-safe: one lock around each operation; the copy of an insertion is
    made outside it.
    """

    def __init__(self, size_bytes: int) -> None:
        self._size_bytes = size_bytes
        self._lock = threading.Lock()
        # key → (model, outputs, bytes); oldest use first; guarded by: _lock
        self._entries: OrderedDict[bytes, tuple[str, Outputs, int]] = OrderedDict()
        self._used_bytes = 0  # guarded by: _lock
        self._evictions = 0  # guarded by: _lock
        self._generations: dict[str, int] = {}  # guarded by: _lock
        self._hits: dict[str, int] = {}  # guarded by: _lock
        self._misses: dict[str, int] = {}  # guarded by: _lock

    @property
    def size_bytes(self) -> int:
        """The bound of what the entries hold."""
        return self._size_bytes

    def lookup(self, model: str, key: bytes) -> tuple[Outputs | None, int]:
        """The answer cached under ``key`` (None: a miss, counted for ``model``), and the
        token to :meth:`insert` the model's answer with after a miss."""
        with self._lock:
            generation = self._generations.get(model, 0)
            entry = self._entries.get(key)
            if entry is None:
                self._misses[model] = self._misses.get(model, 0) + 1
                return None, generation
            self._entries.move_to_end(key)
            self._hits[model] = self._hits.get(model, 0) + 1
            return entry[1], generation

    def insert(self, model: str, key: bytes, outputs: Outputs, token: int) -> bool:
        """Caches ``outputs`` (copied) under ``key``; False when they are bigger than the
        cache or ``token`` (from :meth:`lookup`) is of a generation :meth:`forget` ended."""
        charged = ENTRY_OVERHEAD_BYTES + sum(_charge(value) for value in outputs.values())
        if charged > self._size_bytes:
            return False
        stored = {name: _frozen_copy(value) for name, value in outputs.items()}
        with self._lock:
            if self._generations.get(model, 0) != token:
                return False
            old = self._entries.pop(key, None)
            if old is not None:
                self._used_bytes -= old[2]
            while self._used_bytes + charged > self._size_bytes:
                _, (_, _, freed) = self._entries.popitem(last=False)
                self._used_bytes -= freed
                self._evictions += 1
            self._entries[key] = (model, stored, charged)
            self._used_bytes += charged
        return True

    def forget(self, model: str) -> None:
        """Drops ``model``'s entries and ends its generation (its versions changed)."""
        with self._lock:
            self._generations[model] = self._generations.get(model, 0) + 1
            for key in [k for k, (owner, _, _) in self._entries.items() if owner == model]:
                self._used_bytes -= self._entries.pop(key)[2]

    def usage(self) -> CacheUsage:
        """What the cache holds now and has counted."""
        with self._lock:
            return CacheUsage(
                self._size_bytes,
                self._used_bytes,
                len(self._entries),
                self._evictions,
                dict(self._hits),
                dict(self._misses),
            )


def _charge(value: npt.NDArray[Any]) -> int:
    """The bytes an output holds: its data, or a string tensor's items' lengths."""
    data = value.nbytes
    if value.dtype.kind == "O":
        data += sum(len(item) if isinstance(item, bytes) else 64 for item in value.flat)
    return _TENSOR_OVERHEAD_BYTES + data


def _frozen_copy(value: npt.NDArray[Any]) -> npt.NDArray[Any]:
    copy = np.array(value, copy=True)
    copy.flags.writeable = False
    return copy
