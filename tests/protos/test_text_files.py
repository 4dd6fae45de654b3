"""Every TF Serving text-format file is read one way: the same fault, the same code and shape."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from servinglib.batching.options import read_batching_parameters
from servinglib.errors import (
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    ServingError,
)
from servinglib.server.cli.monitoring_config import read_monitoring_config
from servinglib.server.cli.platform_config_file import read_platform_config_file
from servinglib.server.config import read_model_server_config
from servinglib.server.grpc import SslConfig

READERS: dict[str, Callable[[Path], object]] = {
    "model config": read_model_server_config,
    "batching parameters": read_batching_parameters,
    "platform config": read_platform_config_file,
    "monitoring config": read_monitoring_config,
    "SSL config": SslConfig.read,
}


@pytest.fixture(params=sorted(READERS))
def reader(request: pytest.FixtureRequest) -> tuple[str, Callable[[Path], object]]:
    return request.param, READERS[request.param]


def raised(read: Callable[[Path], object], path: Path) -> ServingError:
    with pytest.raises(ServingError) as caught:
        read(path)
    return caught.value


def test_a_missing_file_is_not_found(
    reader: tuple[str, Callable[[Path], object]], tmp_path: Path
) -> None:
    """A missing file: NOT_FOUND naming what file it is and its path."""
    what, read = reader
    error = raised(read, tmp_path / "missing.config")
    assert isinstance(error, NotFoundError)
    assert error.message == f"The {what} file {tmp_path / 'missing.config'} was not found"


def test_a_directory_or_binary_file_is_an_invalid_argument(
    reader: tuple[str, Callable[[Path], object]], tmp_path: Path
) -> None:
    """A directory, or bytes that are not UTF-8: INVALID_ARGUMENT naming the file."""
    what, read = reader
    assert isinstance(raised(read, tmp_path), InvalidArgumentError)
    binary = tmp_path / "binary.config"
    binary.write_bytes(b"\xff\xfe\x00bad")
    error = raised(read, binary)
    assert isinstance(error, InvalidArgumentError)
    assert error.message.startswith(f"The {what} file {binary} is not UTF-8 text")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their permissions")
def test_an_unreadable_file_is_permission_denied(
    reader: tuple[str, Callable[[Path], object]], tmp_path: Path
) -> None:
    """A file the process may not read: PERMISSION_DENIED."""
    _what, read = reader
    locked = tmp_path / "locked.config"
    locked.write_text("")
    locked.chmod(0)
    assert isinstance(raised(read, locked), PermissionDeniedError)


def test_a_syntax_error_names_the_file_line_and_column(
    reader: tuple[str, Callable[[Path], object]], tmp_path: Path
) -> None:
    """Text that does not parse: INVALID_ARGUMENT, "Invalid <what> in <path>: line L, column C"."""
    _what, read = reader
    bad = tmp_path / "bad.config"
    bad.write_text("no_such_field: 1\n")
    error = raised(read, bad)
    assert isinstance(error, InvalidArgumentError)
    assert f" in {bad}: line 1, column " in error.message
    assert error.message.startswith("Invalid ")
