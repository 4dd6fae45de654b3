"""InotifyWatches: many watched trees on one descriptor and one thread."""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from servinglib.sources import _inotify_watches
from servinglib.sources._inotify_watches import InotifyWatches
from servinglib.testing import wait_until

WAIT_S = 10.0

pytestmark = pytest.mark.skipif(not _inotify_watches.available(), reason="inotify is Linux's")


class Seen:
    """The paths reported, in order.  Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.paths: list[str] = []  # guarded by: _lock
        self.lost = threading.Event()

    def __call__(self, path: str) -> None:
        with self._lock:
            self.paths.append(path)

    def saw(self, path: Path) -> bool:
        with self._lock:
            return str(path) in self.paths


@pytest.fixture
def seen() -> Seen:
    return Seen()


@pytest.fixture
def watches(seen: Seen) -> Iterator[InotifyWatches]:
    watcher = InotifyWatches(seen, include_modifications=False)
    yield watcher
    watcher.close()


def test_a_file_closed_in_a_directory_made_after_the_watch_is_reported(
    tmp_path: Path, seen: Seen, watches: InotifyWatches
) -> None:
    """A recursive watch follows directories made under it: a file written there is reported."""
    watches.watch(str(tmp_path), recursive=True, on_lost=seen.lost.set)
    (tmp_path / "1" / "variables").mkdir(parents=True)
    wait_until(lambda: seen.saw(tmp_path / "1"), WAIT_S)
    (tmp_path / "1" / "variables" / "data").write_bytes(b"x")
    wait_until(lambda: seen.saw(tmp_path / "1" / "variables" / "data"), WAIT_S)


def test_what_a_new_directory_holds_before_its_watch_is_reported(
    tmp_path: Path, seen: Seen, watches: InotifyWatches
) -> None:
    """A directory made and filled before the watcher read its creation (``mkdir -p`` and a
    write racing the reader thread) gets no events of its own: its entries are reported when
    its watch is added."""
    watches.watch(str(tmp_path), recursive=True, on_lost=seen.lost.set)
    with watches._lock:  # the reader thread cannot handle an event meanwhile
        (tmp_path / "1" / "variables").mkdir(parents=True)
        (tmp_path / "1" / "variables" / "data").write_bytes(b"x")
    for path in (
        tmp_path / "1",
        tmp_path / "1" / "variables",
        tmp_path / "1" / "variables" / "data",
    ):
        wait_until(lambda path=path: seen.saw(path), WAIT_S)


def test_a_root_deleted_calls_its_on_lost(
    tmp_path: Path, seen: Seen, watches: InotifyWatches
) -> None:
    """Deleting a watched root calls its ``on_lost``."""
    root = tmp_path / "m"
    (root / "1").mkdir(parents=True)
    watches.watch(str(root), recursive=True, on_lost=seen.lost.set)
    shutil.rmtree(root)
    assert seen.lost.wait(WAIT_S)


def test_an_unwatched_root_reports_nothing_and_many_roots_share_one_thread(
    tmp_path: Path, seen: Seen, watches: InotifyWatches
) -> None:
    """Five hundred roots add no thread; after ``unwatch`` a root's events stop while the
    others' go on."""
    before = threading.active_count()
    roots = [tmp_path / f"m{i}" for i in range(500)]
    for root in roots:
        (root / "1").mkdir(parents=True)
        watches.watch(str(root), recursive=True, on_lost=seen.lost.set)
    assert threading.active_count() == before
    watches.unwatch(str(roots[0]))
    (roots[0] / "1" / "gone").write_bytes(b"x")
    (roots[499] / "1" / "kept").write_bytes(b"x")
    wait_until(lambda: seen.saw(roots[499] / "1" / "kept"), WAIT_S)
    assert not seen.saw(roots[0] / "1" / "gone")


def test_a_version_renamed_into_place_is_reported_under_its_new_name(
    tmp_path: Path, seen: Seen, watches: InotifyWatches
) -> None:
    """A version copied under a temporary name and renamed is reported, and its files after."""
    (tmp_path / ".2.partial").mkdir()
    watches.watch(str(tmp_path), recursive=True, on_lost=seen.lost.set)
    os.rename(tmp_path / ".2.partial", tmp_path / "2")
    wait_until(lambda: seen.saw(tmp_path / "2"), WAIT_S)
    (tmp_path / "2" / "model.py").write_bytes(b"x")
    wait_until(lambda: seen.saw(tmp_path / "2" / "model.py"), WAIT_S)
