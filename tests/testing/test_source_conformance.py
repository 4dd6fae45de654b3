"""Tests for check_source: well-behaved sources pass, each broken one is caught."""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest

from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId
from servinglib.sources import (
    FileSystemStoragePathSource,
    FileSystemStoragePathSourceConfig,
    ServableToMonitor,
    ServableVersionPolicy,
    Source,
    StoragePath,
)
from servinglib.testing import (
    FakeSource,
    Violation,
    assert_source_conforms,
    check_source,
    make_version_dirs,
)

QUICK_S = 0.2  # how long a check waits for an emission that a broken source never makes


def checks(violations: list[Violation]) -> list[str]:
    return [violation.check for violation in violations]


def fake_source_with(versions: dict[int, StoragePath]) -> FakeSource[StoragePath]:
    source: FakeSource[StoragePath] = FakeSource()
    source.set_aspired_versions("m", versions)
    return source


# -- sources that conform ------------------------------------------------------------------


def test_a_fake_source_conforms() -> None:
    """FakeSource with remove_version as the world's removal passes every check."""
    violations = check_source(
        lambda: fake_source_with({1: "/m/1", 2: "/m/2"}), remove_version=FakeSource.remove_version
    )

    assert violations == []


def test_removing_the_last_version_must_emit_an_empty_set() -> None:
    """With one version, the removal is passed by emitting an empty set."""
    assert_source_conforms(
        lambda: fake_source_with({1: "/m/1"}), remove_version=FakeSource.remove_version
    )


def test_the_file_system_source_conforms_when_polled_by_hand(tmp_path: Path) -> None:
    """A FileSystemStoragePathSource over make_version_dirs passes; poll drives it."""
    base = make_version_dirs(tmp_path, "m", [1, 2, 3])
    config = FileSystemStoragePathSourceConfig(
        [ServableToMonitor("m", str(base), ServableVersionPolicy.all())],
        file_system_poll_wait_seconds=-1,  # only poll_once() polls
    )

    def delete_version(_source: FileSystemStoragePathSource, servable_id: ServableId) -> None:
        shutil.rmtree(base / str(servable_id.version))

    violations = check_source(
        lambda: FileSystemStoragePathSource(config),
        remove_version=delete_version,
        poll=FileSystemStoragePathSource.poll_once,
    )

    assert violations == []
    assert sorted(p.name for p in base.iterdir()) == ["1", "2"]  # the highest was removed


def test_the_file_system_source_conforms_with_its_own_thread(tmp_path: Path) -> None:
    """Polling on its own thread, it needs no poll=; close() is called at the end."""
    base = make_version_dirs(tmp_path, "m", [1, 2])
    config = FileSystemStoragePathSourceConfig(
        [ServableToMonitor("m", str(base), ServableVersionPolicy.all())],
        file_system_poll_wait_seconds=0.01,
    )
    made: list[FileSystemStoragePathSource] = []

    def factory() -> FileSystemStoragePathSource:
        made.append(FileSystemStoragePathSource(config))
        return made[0]

    assert_source_conforms(
        factory, remove_version=lambda _source, sid: shutil.rmtree(base / str(sid.version))
    )
    assert not made[0].polling


# -- broken sources are caught -------------------------------------------------------------


class Scripted(Source[StoragePath]):
    """Emits the given sets when connected, and ``after_removal`` when told a version went."""

    def __init__(
        self,
        sets: Sequence[tuple[str, Sequence[ServableData[StoragePath]]]],
        after_removal: Sequence[ServableData[StoragePath]] | None = None,
    ) -> None:
        super().__init__()
        self.sets = sets
        self.after_removal = after_removal

    def _on_connected(self) -> None:
        for name, versions in self.sets:
            self.emit_aspired_versions(name, versions)

    def remove(self, servable_id: ServableId) -> None:
        if self.after_removal is not None:
            self.emit_aspired_versions(servable_id.name, self.after_removal)


def item(name: str, version: int) -> ServableData[StoragePath]:
    return ServableData.of(ServableId(name, version), f"/{name}/{version}")


def test_a_source_that_emits_nothing_is_caught() -> None:
    """No emission within the timeout is "emits", and nothing else is checked."""
    violations = check_source(lambda: Scripted([]), timeout_s=QUICK_S)

    assert checks(violations) == ["emits"]
    assert "emitted nothing within 0.2 s of being connected" in violations[0].message


def test_a_set_naming_another_servable_is_caught() -> None:
    """An item of servable b in the set of a is complete-sets."""
    violations = check_source(lambda: Scripted([("a", [item("a", 1), item("b", 1)])]))

    assert checks(violations) == ["complete-sets"]
    assert "holds {name: b version: 1}, a version of another servable" in str(violations[0])


def test_a_version_listed_twice_is_caught() -> None:
    """The same version twice in one set is complete-sets."""
    violations = check_source(lambda: Scripted([("a", [item("a", 1), item("a", 1)])]))

    assert checks(violations) == ["complete-sets"]
    assert "holds version 1 twice" in violations[0].message


def test_a_source_that_ignores_removals_is_caught() -> None:
    """A source that never re-emits after a removal is omission-unloads."""
    violations = check_source(
        lambda: Scripted([("a", [item("a", 1), item("a", 2)])]),
        remove_version=Scripted.remove,
        timeout_s=QUICK_S,
    )

    assert checks(violations) == ["omission-unloads"]
    assert violations[0].message.startswith(
        "after version 2 of a was removed, the source emitted no new set for a within 0.2 s"
    )


def test_a_source_that_emits_changes_instead_of_sets_is_caught() -> None:
    """A source that re-emits the removed version (a "delta" of what changed) is caught."""
    violations = check_source(
        lambda: Scripted([("a", [item("a", 1), item("a", 2)])], after_removal=[item("a", 2)]),
        remove_version=Scripted.remove,
        timeout_s=QUICK_S,
    )

    assert checks(violations) == ["omission-unloads"]
    assert "the source emitted [2] for a" in violations[0].message


def test_removal_needs_a_version_to_remove() -> None:
    """If every set is empty, the removal check says it could not run."""
    violations = check_source(lambda: Scripted([("a", [])]), remove_version=Scripted.remove)

    assert checks(violations) == ["omission-unloads"]
    assert "every set the source emitted is empty" in violations[0].message


def test_assert_source_conforms_lists_the_violations_and_skip_drops_them() -> None:
    """The AssertionError lists each violation; skipped checks are not reported."""

    def broken() -> Scripted:
        return Scripted([("a", [item("a", 1), item("a", 1)])])

    with pytest.raises(AssertionError, match=r"The source breaks its contract in 1 way\(s\)"):
        assert_source_conforms(broken)
    assert check_source(broken, skip=["complete-sets"]) == []
    with pytest.raises(ValueError, match="unknown check ids"):
        check_source(broken, skip=["complete-set"])


def test_the_close_given_is_called() -> None:
    """close(source) runs at the end, even when a check fails."""
    closed: list[Source[StoragePath]] = []
    source = Scripted([])

    check_source(lambda: source, close=closed.append, timeout_s=QUICK_S)

    assert closed == [source]
