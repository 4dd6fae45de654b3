"""Tests that connect()'s item types are checked statically: mypy rejects mismatched stages.

Slow-ish (about a second, more with an uncompiled mypy): it runs mypy once, in-process,
over two small snippets with a fresh cache, so the servinglib modules they import are
type-checked on the way.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

from mypy import api

GOOD = """\
from servinglib.core.aspired_versions_manager import AspiredVersionsManager
from servinglib.core.loader import Loader
from servinglib.sources.source import Source, StoragePath
from servinglib.sources.source_adapter import SourceAdapter
from servinglib.sources.static_storage_path_source import StaticStoragePathSource
from servinglib.sources.target import connect


def wire(
    source: Source[StoragePath],
    adapter: SourceAdapter[StoragePath, Loader],
    manager: AspiredVersionsManager,
) -> None:
    connect(source, adapter)
    connect(adapter, manager)
    connect(StaticStoragePathSource("m", 1, "/models/m/1"), adapter)
"""

BAD = """\
from servinglib.core.aspired_versions_manager import AspiredVersionsManager
from servinglib.sources.source import Source, StoragePath
from servinglib.sources.target import connect


def wire(source: Source[StoragePath], manager: AspiredVersionsManager) -> None:
    connect(source, manager)  # line 7: paths straight into a manager of loaders
"""
BAD_LINE = 7


def test_connect_rejects_mismatched_item_types_and_accepts_matching_ones(
    tmp_path: Path,
) -> None:
    """A Source[StoragePath] cannot feed a manager directly; through an adapter it can."""
    good, bad = tmp_path / "good.py", tmp_path / "bad.py"
    good.write_text(textwrap.dedent(GOOD))
    bad.write_text(textwrap.dedent(BAD))
    assert "connect(source, manager)" in BAD.splitlines()[BAD_LINE - 1]
    config = tmp_path / "mypy.ini"  # isolates the check from the project's own settings
    config.write_text("[mypy]\n")

    stdout, stderr, status = api.run(
        [
            "--config-file",
            str(config),
            "--strict",
            "--cache-dir",
            str(tmp_path / "mypy_cache"),
            "--no-error-summary",
            "--show-error-codes",
            str(good),
            str(bad),
        ]
    )

    errors = [line for line in stdout.splitlines() if ": error:" in line]
    assert stderr == ""
    assert status == 1, stdout
    assert [line for line in errors if line.startswith(str(good))] == [], stdout
    assert errors, stdout
    assert all(line.startswith(f"{bad}:{BAD_LINE}:") for line in errors), stdout
