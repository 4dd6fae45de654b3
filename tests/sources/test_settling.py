"""The file-system source's settle window, version checks and say-it-once log, on a FakeClock."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from servinglib.sources import (
    FileSystemStoragePathSource,
    FileSystemStoragePathSourceConfig,
    ServableToMonitor,
    connect,
)
from servinglib.sources import _version_settling as settling
from servinglib.testing import FakeClock, RecordingTarget, wait_until

SETTLE_S = 0.5


def needs_model_py(path: str) -> str | None:
    """A version check: complete once model.py is there."""
    return None if os.path.isfile(os.path.join(path, "model.py")) else "no model.py yet"


class Rig:
    """A periodically polling source on a FakeClock (no full poll unless advanced 60 s)."""

    def __init__(self, base: Path) -> None:
        self.clock = FakeClock()
        self.target = RecordingTarget()
        self.source = FileSystemStoragePathSource(
            FileSystemStoragePathSourceConfig(
                (ServableToMonitor("m", str(base), version_check=needs_model_py),),
                file_system_poll_wait_seconds=60.0,
                watch_filesystem_events=False,
                settle_window_s=SETTLE_S,
            ),
            clock=self.clock,
        )
        connect(self.source, self.target)

    def versions(self) -> tuple[int, ...] | None:
        calls = self.target.calls("m")
        return calls[-1].version_numbers if calls else None


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    (tmp_path / "m").mkdir()
    made = Rig(tmp_path / "m")
    yield made
    made.source.close()


def test_fresh_version_is_offered_when_its_settle_window_ends(rig: Rig, tmp_path: Path) -> None:
    """A complete version written just now is offered only once the settle window passed quiet."""
    (tmp_path / "m" / "1").mkdir()
    (tmp_path / "m" / "1" / "model.py").write_text("x")
    rig.source.poll_once()
    assert rig.versions() == ()
    rig.clock.advance(SETTLE_S)
    wait_until(lambda: rig.versions() == (1,), 10.0)


def test_incomplete_version_waits_however_quiet(rig: Rig, tmp_path: Path) -> None:
    """A version its check finds incomplete is not offered, even after its files are quiet."""
    (tmp_path / "m" / "1").mkdir()
    (tmp_path / "m" / "1" / "weights.bin").write_text("x")
    rig.source.poll_once()
    rig.clock.advance(SETTLE_S * 4)
    rig.source.poll_once()
    assert rig.versions() == ()


def test_changing_files_restart_the_window(rig: Rig, tmp_path: Path) -> None:
    """A write inside the window restarts it: the version is offered a window after the last."""
    version = tmp_path / "m" / "1"
    version.mkdir()
    (version / "model.py").write_text("x")
    rig.source.poll_once()
    rig.clock.advance(SETTLE_S * 0.6)
    (version / "weights.bin").write_text("more")
    rig.source.poll_once()
    rig.clock.advance(SETTLE_S * 0.6)
    rig.source.poll_once()
    assert rig.versions() == ()
    rig.clock.advance(SETTLE_S * 0.6)
    rig.source.poll_once()
    assert rig.versions() == (1,)


def test_changed_version_is_offered_again_with_the_next_revision(rig: Rig, tmp_path: Path) -> None:
    """An offered version whose files change and settle again is re-emitted as revision 1."""
    version = tmp_path / "m" / "1"
    version.mkdir()
    (version / "model.py").write_text("x")
    rig.source.poll_once()
    rig.clock.advance(SETTLE_S)
    rig.source.poll_once()
    (version / "model.py").write_text("fixed")
    rig.source.poll_once()
    rig.clock.advance(SETTLE_S)
    rig.source.poll_once()
    revisions = [c.versions[0].revision for c in rig.target.calls("m") if c.versions]
    assert revisions[0] == 0
    assert revisions[-1] == 1


def test_a_bare_model_settles_like_a_version(rig: Rig, tmp_path: Path) -> None:
    """A model put directly in the base path is offered as version 0 once quiet, with no error."""
    (tmp_path / "m" / "model.py").write_text("x")
    rig.source.poll_once()
    assert not rig.versions()
    rig.clock.advance(SETTLE_S)
    rig.source.poll_once()
    assert rig.versions() == (0,)
    assert rig.source.servable_errors() == {}


def test_no_versions_is_logged_when_it_starts_and_ends(
    rig: Rig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An empty base path is logged once however often it is polled, and again when it ends."""
    with caplog.at_level(logging.INFO, logger="servinglib.sources"):
        for _ in range(3):
            rig.source.poll_once()
        (tmp_path / "m" / "1").mkdir()
        (tmp_path / "m" / "1" / "model.py").write_text("x")
        rig.clock.advance(SETTLE_S)
        rig.source.poll_once()
    messages = [r.getMessage() for r in caplog.records]
    assert sum("No versions of servable m" in m for m in messages) == 1
    assert sum("resolved" in m for m in messages) == 1


def test_files_that_keep_changing_are_reported_once_by_name(
    rig: Rig, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A file that never stops changing is reported once, by name; the version is not offered."""
    version = tmp_path / "m" / "1"
    version.mkdir()
    (version / "model.py").write_text("x")
    log = version / "server.log"
    with caplog.at_level(logging.WARNING, logger="servinglib.sources"):
        for step in range(int(settling.RESTLESS_REPORT_S / 0.25) + 8):
            log.write_text("line\n" * (step + 1))
            rig.source.poll_once()
            rig.clock.advance(0.25)
    reports = [r.getMessage() for r in caplog.records if "keep changing" in r.getMessage()]
    assert len(reports) == 1
    assert "server.log" in reports[0]
    assert rig.versions() == ()


def test_version_written_just_before_connecting_is_offered_after_its_window(
    tmp_path: Path,
) -> None:
    """A fresh version found by the first poll, before the polling thread starts, is not lost."""
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "model.py").write_text("x")
    rig = Rig(tmp_path / "m")
    try:
        assert rig.versions() is None  # nothing offered, nor withdrawn, while it settles
        rig.clock.advance(SETTLE_S)
        wait_until(lambda: rig.versions() == (1,), 10.0)
    finally:
        rig.source.close()
