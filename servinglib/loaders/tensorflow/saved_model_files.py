"""What a complete SavedModel directory holds, checked without TensorFlow."""

from __future__ import annotations

import functools
import os
import struct
from collections.abc import Iterator
from typing import Any

from servinglib.sources.version_check import VersionCheck

_GRAPH_FILES = ("saved_model.pb", "saved_model.pbtxt")
_INDEX = os.path.join("variables", "variables.index")
_FOOTER_BYTES = 48
_MAGIC = struct.pack("<Q", 0xDB4775248B80FB57)
_BLOCK_TRAILER_BYTES = 5  # compression type, crc32c
_NO_COMPRESSION = 0


class _Unreadable(Exception):  # noqa: N818 - private, never escapes this module
    """The index is complete but not in a form this reader knows (let TensorFlow judge)."""


class _Truncated(_Unreadable):
    """A message ends inside a field (``saved_model.pb``: or before its first meta graph)."""


def version_check(_config: Any) -> VersionCheck:  # noqa: ANN401 - the platform's config, unused
    """The "tensorflow" platform's version check: :func:`saved_model_check`."""
    return saved_model_check


def saved_model_check(path: str) -> str | None:
    """Why the SavedModel directory ``path`` is not complete yet, or None when it is.

    Incomplete: no graph file; data shards but no index yet; an index whose
    footer is not written yet; a shard the index names missing or shorter
    than the tensors the index places in it.  An index this reader cannot
    parse is left to the loader (None).
    Thread safety: any thread.
    """
    if not any(os.path.isfile(os.path.join(path, name)) for name in _GRAPH_FILES):
        return "no saved_model.pb or saved_model.pbtxt yet"
    try:
        declared = _graph_variables(path)
    except _Truncated:
        return f"{_GRAPH_FILES[0]} is not completely written yet"
    return _variables_problem(path, declared)


def _variables_problem(path: str, declared: int | None) -> str | None:
    """Why ``variables/`` is not complete yet (``declared``: the graph's variables, if known)."""
    index = os.path.join(path, _INDEX)
    try:
        with open(index, "rb") as file:
            table = file.read()
    except FileNotFoundError:
        return _no_index(path, declared)
    except PermissionError:
        return None  # a copy does not make this: the loader says PERMISSION_DENIED
    except OSError as exc:
        return f"cannot read {_INDEX}: {exc.strerror}"
    if len(table) < _FOOTER_BYTES or not table.endswith(_MAGIC):
        return f"{_INDEX} is not completely written yet"
    return _short_shard(path, table)


def _short_shard(path: str, table: bytes) -> str | None:
    """A data shard the index ``table`` names that is missing or too short, if any."""
    try:
        num_shards, needed = _shard_sizes(table)
    except (_Unreadable, IndexError, struct.error):
        return None
    for shard in range(num_shards):
        name = f"variables.data-{shard:05d}-of-{num_shards:05d}"
        try:
            size = os.stat(os.path.join(path, "variables", name)).st_size
        except OSError:
            return f"variables/{name} is missing"
        if size < needed.get(shard, 0):
            return f"variables/{name} holds {size} of its {needed[shard]} bytes"
    return None


def _no_index(path: str, declared: int | None) -> str | None:
    """Files in ``variables/`` without an index (data shards, a copier's temp files) are
    half-copied; so is a graph that declares variables (``declared``; None: not known),
    whatever ``variables/`` holds (a writer may pause between files); otherwise, a graph
    without variables."""
    try:
        names = os.listdir(os.path.join(path, "variables"))
    except OSError:
        names = []
    if names:
        return f"{_INDEX} is missing"
    return f"{_INDEX} is missing (the graph has {declared} variables)" if declared else None


def _graph_variables(path: str) -> int | None:
    """The variables ``saved_model.pb`` declares; None for a .pbtxt or a graph this reader
    cannot parse (the loader judges).  Raises _Truncated while it is still being written."""
    graph = os.path.join(path, _GRAPH_FILES[0])
    try:
        info = os.stat(graph)
        return _declared_variables(graph, info.st_size, info.st_mtime_ns)
    except _Truncated:
        raise
    except (OSError, _Unreadable, struct.error):
        return None


@functools.lru_cache(maxsize=64)  # a version waiting for its index is looked at repeatedly
def _declared_variables(graph: str, _size: int, _mtime_ns: int) -> int:
    """The variables the object graph of ``saved_model.pb`` declares (as the loader counts).

    SavedModel.meta_graphs = 2 → MetaGraphDef.object_graph_def = 7 →
    SavedObjectGraph.nodes = 1 → SavedObject.variable = 7.  ``_size`` and
    ``_mtime_ns`` key the cache: a rewritten file is read again.  Raises
    _Truncated when the file ends inside a field or holds no meta graph: a
    complete message's fields end exactly at its end, and a SavedModel has
    at least one meta graph (a copy cut between two fields is told by that).
    """
    with open(graph, "rb") as file:
        saved_model = file.read()
    meta_graphs = list(_submessages(saved_model, 2))  # _Truncated: cut inside a field
    if not meta_graphs:
        raise _Truncated
    try:
        return sum(
            1
            for meta_graph in meta_graphs
            for object_graph in _submessages(meta_graph, 7)
            for node in _submessages(object_graph, 1)
            if any(True for _ in _submessages(node, 7))
        )
    except _Truncated:  # inside a whole file: not a SavedModel this reader knows
        raise _Unreadable from None


def _fields(message: bytes) -> Iterator[tuple[int, int, int | bytes]]:
    """A protobuf message's fields in order: (number, wire type, value), the value an int for
    a varint, the bytes of a length-delimited field, 0 for a fixed-width one.

    Raises _Truncated when a field runs past the message's end, _Unreadable for a group.
    """
    pos, end = 0, len(message)
    while pos < end:
        tag, pos = _varint(message, pos)
        wire_type = tag & 7
        value: int | bytes = 0
        if wire_type == 0:
            value, pos = _varint(message, pos)
        elif wire_type == 2:
            length, pos = _varint(message, pos)
            value = message[pos : pos + length]
            pos += length
        elif wire_type in (1, 5):
            pos += 8 if wire_type == 1 else 4
        else:
            raise _Unreadable  # a group: no field this reader looks at is one
        if pos > end:
            raise _Truncated
        yield tag >> 3, wire_type, value


def _submessages(message: bytes, number: int) -> Iterator[bytes]:
    """The length-delimited fields ``number`` of a protobuf message, in order."""
    for found, _, value in _fields(message):
        if found == number and isinstance(value, bytes):  # length-delimited
            yield value


def _shard_sizes(table: bytes) -> tuple[int, dict[int, int]]:
    """The number of shards and, per shard, the end of its last tensor."""
    footer = table[-_FOOTER_BYTES:]
    _, pos = _varint(footer, 0)  # the metaindex block's offset
    _, pos = _varint(footer, pos)  # and size
    index_offset, pos = _varint(footer, pos)
    index_size, _ = _varint(footer, pos)
    num_shards = 1
    needed: dict[int, int] = {}
    for _, handle in _entries(_block(table, index_offset, index_size)):
        offset, pos = _varint(handle, 0)
        size, _ = _varint(handle, pos)
        for key, value in _entries(_block(table, offset, size)):
            fields = _varint_fields(value)
            if key == b"":  # the BundleHeaderProto
                num_shards = fields.get(1, 1)
                continue
            # BundleEntryProto: shard_id = 3, offset = 4, size = 5
            shard, end = fields.get(3, 0), fields.get(4, 0) + fields.get(5, 0)
            needed[shard] = max(needed.get(shard, 0), end)
    return num_shards, needed


def _block(table: bytes, offset: int, size: int) -> bytes:
    if offset + size + _BLOCK_TRAILER_BYTES > len(table):
        raise _Unreadable
    if table[offset + size] != _NO_COMPRESSION:
        raise _Unreadable
    return table[offset : offset + size]


def _entries(block: bytes) -> Iterator[tuple[bytes, bytes]]:
    """A table block's (key, value) pairs (keys share prefixes with the previous key)."""
    (num_restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    limit = len(block) - 4 - 4 * num_restarts
    pos, key = 0, b""
    while pos < limit:
        shared, pos = _varint(block, pos)
        unshared, pos = _varint(block, pos)
        value_size, pos = _varint(block, pos)
        key = key[:shared] + block[pos : pos + unshared]
        pos += unshared
        yield key, block[pos : pos + value_size]
        pos += value_size


def _varint_fields(message: bytes) -> dict[int, int]:
    """The varint fields of a protobuf message by number (the others skipped)."""
    return {
        number: value
        for number, wire_type, value in _fields(message)
        if wire_type == 0 and isinstance(value, int)
    }


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        try:
            byte = data[pos]
        except IndexError:
            raise _Truncated from None  # cut inside the varint
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7
        if shift > 63:
            raise _Unreadable
