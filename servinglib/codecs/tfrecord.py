"""TFRecord files (TF Serving's warmup requests, among others), read and written without TF."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Iterator
from typing import BinaryIO, TypeAlias

import google_crc32c

from servinglib.errors import DataLossError

_LENGTH = struct.Struct("<Q")
_CRC = struct.Struct("<I")
_HEADER_SIZE = _LENGTH.size + _CRC.size
_MASK_DELTA = 0xA282EAD8
_UINT32 = 0xFFFFFFFF

StrPath: TypeAlias = str | os.PathLike[str]


def masked_crc32c(data: bytes) -> int:
    """TFRecord's checksum of ``data``: its CRC32C, rotated right by 15 bits, plus a constant."""
    crc: int = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + _MASK_DELTA) & _UINT32


def read_records(path: StrPath, *, max_records: int | None = None) -> Iterator[bytes]:
    """The records of the TFRecord file at ``path``, in order, read lazily.

    ``max_records`` stops after that many records, without reading (or checking) the rest.
    The file is opened at the first ``next()`` and closed when the iterator is exhausted or
    closed.  Iterating raises DataLossError, naming the file and the record's index, for a
    truncated header or record and for a length or data checksum that does not match; and
    OSError when the file cannot be read.
    Raises ValueError at once for a negative ``max_records``.
    """
    if max_records is not None and max_records < 0:
        raise ValueError(f"max_records must be >= 0 or None, got {max_records}")
    return _records(path, max_records)


def write_records(path: StrPath, records: Iterable[bytes]) -> int:
    """Writes ``records`` as the TFRecord file at ``path`` (replacing it); returns their count."""
    count = 0
    with open(path, "wb") as file:
        for record in records:
            file.write(framed_record(record))
            count += 1
    return count


def framed_record(record: bytes) -> bytes:
    """``record`` framed as one TFRecord (length, its checksum, data, its checksum).

    Appending framed records to a file makes a TFRecord file (for writers
    that keep a file open, such as request logs).
    """
    length = _LENGTH.pack(len(record))
    return b"".join(
        (length, _CRC.pack(masked_crc32c(length)), record, _CRC.pack(masked_crc32c(record)))
    )


def _records(path: StrPath, max_records: int | None) -> Iterator[bytes]:
    with open(path, "rb") as file:
        size = os.fstat(file.fileno()).st_size
        index = 0
        while max_records is None or index < max_records:
            record = _read_record(file, size, path, index)
            if record is None:
                return
            yield record
            index += 1


def _read_record(file: BinaryIO, size: int, path: StrPath, index: int) -> bytes | None:
    """The next record of ``file``, or None at a clean end of the file."""
    offset = file.tell()
    header = file.read(_HEADER_SIZE)
    if not header:
        return None

    def corrupt(what: str) -> DataLossError:
        return DataLossError(
            f"Corrupt TFRecord file {os.fspath(path)}: record {index} (at byte {offset}): {what}"
        )

    if len(header) < _HEADER_SIZE:
        raise corrupt(f"truncated header ({len(header)} of {_HEADER_SIZE} bytes)")
    length_bytes = header[: _LENGTH.size]
    (length_crc,) = _CRC.unpack_from(header, _LENGTH.size)
    if masked_crc32c(length_bytes) != length_crc:
        raise corrupt("length checksum mismatch")
    (length,) = _LENGTH.unpack(length_bytes)
    available = size - offset - _HEADER_SIZE
    if length + _CRC.size > available:
        raise corrupt(
            f"truncated record ({length} bytes of data and a {_CRC.size}-byte checksum expected,"
            f" {max(available, 0)} bytes left)"
        )
    data = file.read(length)
    footer = file.read(_CRC.size)
    if len(data) != length or len(footer) != _CRC.size:
        raise corrupt("truncated record (the file shrank while being read)")
    (data_crc,) = _CRC.unpack(footer)
    if masked_crc32c(data) != data_crc:
        raise corrupt("data checksum mismatch")
    return data
