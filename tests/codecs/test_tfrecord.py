"""Tests for servinglib.codecs.tfrecord: TFRecord files, checked against TensorFlow's own."""

from __future__ import annotations

from pathlib import Path

import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servinglib.codecs.tfrecord import masked_crc32c, read_records, write_records
from servinglib.errors import DataLossError

RECORDS = [b"first", b"", b"\x00\xff" * 300, b"last"]
HEADER_SIZE = 12  # uint64 length + uint32 masked CRC of the length
FOOTER_SIZE = 4  # uint32 masked CRC of the data


@pytest.fixture
def records_file(tmp_path: Path) -> Path:
    """A TFRecord file of RECORDS written by our writer."""
    path = tmp_path / "records.tfrecord"
    write_records(path, RECORDS)
    return path


def offset_of(index: int) -> int:
    """Byte offset of record ``index`` of RECORDS in a file holding them."""
    return sum(HEADER_SIZE + len(record) + FOOTER_SIZE for record in RECORDS[:index])


def flip_byte(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(st.binary(max_size=64), max_size=10))
def test_round_trip(tmp_path: Path, records: list[bytes]) -> None:
    """Records written by write_records are read back by read_records, in order."""
    path = tmp_path / "round_trip.tfrecord"

    count = write_records(path, records)

    assert count == len(records)
    assert list(read_records(path)) == records


def test_tensorflow_reads_our_file(records_file: Path) -> None:
    """tf.data.TFRecordDataset reads our writer's file record for record."""
    read = [record.numpy() for record in tf.data.TFRecordDataset(str(records_file))]

    assert read == RECORDS


def test_we_read_tensorflows_file(tmp_path: Path) -> None:
    """read_records reads a file written by tf.io.TFRecordWriter."""
    path = tmp_path / "theirs.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in RECORDS:
            writer.write(record)

    assert list(read_records(path)) == RECORDS


def test_files_are_byte_identical_to_tensorflows(tmp_path: Path, records_file: Path) -> None:
    """Our writer and tf.io.TFRecordWriter write the same bytes for the same records."""
    theirs = tmp_path / "theirs.tfrecord"
    with tf.io.TFRecordWriter(str(theirs)) as writer:
        for record in RECORDS:
            writer.write(record)

    assert records_file.read_bytes() == theirs.read_bytes()


def test_masked_crc_of_known_values() -> None:
    """The masked CRC32C matches values computed by hand from the CRC32C test vector."""
    # crc32c(b"123456789") = 0xE3069283 (the standard check value); masked by TFRecord's rule.
    crc = 0xE3069283
    expected = (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF

    assert masked_crc32c(b"123456789") == expected


def test_empty_file_has_no_records(tmp_path: Path) -> None:
    """An empty file is a valid TFRecord file with no records."""
    path = tmp_path / "empty.tfrecord"
    path.write_bytes(b"")

    assert list(read_records(path)) == []


@pytest.mark.parametrize(
    ("offset", "message"),
    [
        (offset_of(2) + HEADER_SIZE + 17, "record 2 .*data checksum mismatch"),
        (offset_of(3) + 1, "record 3 .*length checksum mismatch"),
        (offset_of(1) + 9, "record 1 .*length checksum mismatch"),
        (offset_of(3) - 2, "record 2 .*data checksum mismatch"),
    ],
    ids=["data", "length", "length-crc", "data-crc"],
)
def test_flipped_byte_is_data_loss(records_file: Path, offset: int, message: str) -> None:
    """A flipped bit in a record's data, length or either checksum raises DataLossError."""
    flip_byte(records_file, offset)

    with pytest.raises(DataLossError, match=message) as raised:
        list(read_records(records_file))

    assert str(records_file) in raised.value.message


def test_tensorflow_also_rejects_a_flipped_data_byte(records_file: Path) -> None:
    """TensorFlow's reader fails on the file ours rejects (so the check is not ours alone)."""
    flip_byte(records_file, offset_of(2) + HEADER_SIZE + 17)

    with pytest.raises(tf.errors.DataLossError):
        list(tf.data.TFRecordDataset(str(records_file)))


@pytest.mark.parametrize(
    ("cut", "index", "message"),
    [
        (offset_of(1) + 5, 1, r"truncated header \(5 of 12 bytes\)"),
        (offset_of(2) + HEADER_SIZE + 10, 2, "truncated record"),
        (offset_of(4) - 1, 3, "truncated record"),
    ],
    ids=["header", "data", "footer"],
)
def test_truncated_file_is_data_loss(
    records_file: Path, cut: int, index: int, message: str
) -> None:
    """A file cut in a header, data or checksum raises DataLossError after the intact records."""
    records_file.write_bytes(records_file.read_bytes()[:cut])
    read = read_records(records_file)

    assert [next(read) for _ in range(index)] == RECORDS[:index]
    with pytest.raises(DataLossError, match=f"record {index} .*{message}"):
        next(read)


def test_max_records_stops_before_a_corrupt_tail(records_file: Path) -> None:
    """max_records=N yields the first N records and never reads (or checks) the rest."""
    flip_byte(records_file, offset_of(2) + HEADER_SIZE)

    assert list(read_records(records_file, max_records=2)) == RECORDS[:2]
    assert list(read_records(records_file, max_records=0)) == []
    with pytest.raises(DataLossError):
        list(read_records(records_file, max_records=3))


def test_max_records_beyond_the_file_reads_all(records_file: Path) -> None:
    """A max_records above the file's count yields every record."""
    assert list(read_records(records_file, max_records=100)) == RECORDS


def test_negative_max_records_is_rejected_at_once(records_file: Path) -> None:
    """A negative max_records raises ValueError when called, before any iteration."""
    with pytest.raises(ValueError, match="max_records"):
        read_records(records_file, max_records=-1)


def test_missing_file_raises_os_error(tmp_path: Path) -> None:
    """A missing file raises FileNotFoundError on iteration (not DataLossError)."""
    with pytest.raises(FileNotFoundError):
        list(read_records(tmp_path / "missing.tfrecord"))
