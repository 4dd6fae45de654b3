"""FileSystemStoragePathSource on real temp dirs: parsing, policies, config, faults, pickup."""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servinglib.core.aspired_versions_manager import AspiredVersionsManager
from servinglib.core.availability_preserving_policy import AvailabilityPreservingPolicy
from servinglib.core.clock import Clock, Timer
from servinglib.core.event_bus import EventBus
from servinglib.core.loader import Loader
from servinglib.core.servable_id import ServableId
from servinglib.core.servable_state import ManagerState, ServableState
from servinglib.core.servable_state_monitor import ServableStateMonitor
from servinglib.core.storage_condition import StorageCondition
from servinglib.errors import InvalidArgumentError, StatusCode
from servinglib.sources import (
    FileSystemStoragePathSource,
    FileSystemStoragePathSourceConfig,
    ServableToMonitor,
    ServableVersionPolicy,
    StoragePath,
    UnarySourceAdapter,
    connect,
)
from servinglib.testing import (
    AspiredVersionsCall,
    FakeClock,
    FakeLoader,
    RecordingTarget,
    wait_until,
)

# Bound on waits for the polling or watchdog thread; the pickup target is 1 s, asserted
# on the measured latency, so a wait that expires means the event was lost.
PICKUP_TIMEOUT_S = 2.0
PICKUP_TARGET_S = 1.0
PERIOD_S = 60.0  # long enough that no full poll happens unless a test advances the FakeClock
FS_THREAD = "servinglib-fs-source"


# --------------------------------------------------------------------------- doubles


class FakeLoaderAdapter(UnarySourceAdapter[StoragePath, Loader]):
    """Turns each version directory into a FakeLoader serving its path."""

    def convert(self, servable_name: str, data: StoragePath) -> Loader:
        return FakeLoader(data)


class SteppedManager:
    """An AspiredVersionsManager behind a FakeLoader adapter, stepped by hand (sync loads)."""

    def __init__(self) -> None:
        self.bus: EventBus[ServableState] = EventBus()
        self.monitor = ServableStateMonitor(self.bus)
        self.manager = AspiredVersionsManager(
            AvailabilityPreservingPolicy(), manage_state_interval_s=None, event_bus=self.bus
        )
        self.adapter = FakeLoaderAdapter()
        connect(self.adapter, self.manager)

    def settle(self) -> None:
        while self.manager.run_once():
            pass

    def available(self) -> set[ServableId]:
        return set(self.manager.list_available_servable_ids())

    def state(self, name: str, version: int) -> ManagerState | None:
        found = self.monitor.get_state(ServableId(name, version))
        return found.manager_state if found is not None else None

    def close(self) -> None:
        self.manager.close()
        self.monitor.close()


class Rig(NamedTuple):
    """A source on a FakeClock and the target it emits to."""

    source: FileSystemStoragePathSource
    target: RecordingTarget[StoragePath]
    clock: FakeClock


Start = Callable[..., Rig]
"""The ``start`` fixture: ``start(*servables, period_s=..., connected=..., **config)``."""


# --------------------------------------------------------------------------- helpers


def last_versions(target: RecordingTarget[StoragePath], name: str) -> tuple[int, ...] | None:
    """The version numbers of the last set sent for ``name``, or None if none was."""
    calls = target.calls(name)
    return calls[-1].version_numbers if calls else None


def first_with(
    target: RecordingTarget[StoragePath], name: str, version: int
) -> AspiredVersionsCall[StoragePath] | None:
    """The first call for ``name`` whose aspired set holds ``version``, or None."""
    return next((c for c in target.calls(name) if version in c.version_numbers), None)


def make_version(base: Path, name: str | int, files: Sequence[str] = ("saved_model.pb",)) -> Path:
    """A version directory ``base/name`` holding ``files``."""
    path = base / str(name)
    path.mkdir(parents=True)
    for file in files:
        (path / file).write_text(file)
    return path


def config(
    *servables: ServableToMonitor, period_s: float = -1.0, **options: Any
) -> FileSystemStoragePathSourceConfig:
    """A config; no settle window unless given (tests/sources/test_publishing.py covers it)."""
    options.setdefault("settle_window_s", 0.0)
    return FileSystemStoragePathSourceConfig(
        servables,
        file_system_poll_wait_seconds=period_s,
        **options,
    )


def monitor(
    name: str, base: Path, policy: ServableVersionPolicy | None = None
) -> ServableToMonitor:
    if policy is None:
        return ServableToMonitor(name, str(base))
    return ServableToMonitor(name, str(base), policy)


def fs_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == FS_THREAD]


@pytest.fixture
def start() -> Iterator[Start]:
    """Builds a source on a FakeClock, connects it to a RecordingTarget; closes it afterwards."""
    made: list[FileSystemStoragePathSource] = []

    def build(
        *servables: ServableToMonitor,
        period_s: float = -1.0,
        connected: bool = True,
        **options: Any,
    ) -> Rig:
        clock = FakeClock()
        source = FileSystemStoragePathSource(
            config(*servables, period_s=period_s, **options), clock=clock
        )
        made.append(source)
        target: RecordingTarget[StoragePath] = RecordingTarget()
        if connected:
            connect(source, target)
        return Rig(source, target, clock)

    yield build
    for source in made:
        source.close()


@pytest.fixture
def stepped() -> Iterator[SteppedManager]:
    manager = SteppedManager()
    yield manager
    manager.close()


# --------------------------------------------------------------------------- version dirs


def test_version_dir_names_are_parsed_as_decimal_numbers(tmp_path: Path, start: Start) -> None:
    """Only children named by ASCII digits are versions, leading zeros dropped (00012 is 12)."""
    base = tmp_path / "m"
    for name in ["00012", "3", "0", "12.tmp", "abc", "-1", "+3", "1_0", " 5", "5 ", "٣", "0x7"]:
        make_version(base, name)
    rig = start(monitor("m", base, ServableVersionPolicy.all()))
    rig.source.poll_once()
    [call] = rig.target.calls("m")
    assert call.version_numbers == (0, 3, 12)
    assert [item.data for item in call.versions] == [
        str(base / "0"),
        str(base / "3"),
        str(base / "00012"),
    ]


def test_files_named_like_versions_are_ignored(tmp_path: Path, start: Start) -> None:
    """A regular file named ``7`` (or a symlink to a file) is not a version."""
    base = tmp_path / "m"
    make_version(base, 1)
    (base / "7").write_text("not a directory")
    (base / "8").symlink_to(base / "7")
    rig = start(monitor("m", base, ServableVersionPolicy.all()))
    rig.source.poll_once()
    assert last_versions(rig.target, "m") == (1,)


def test_symlink_to_a_version_dir_is_a_version(tmp_path: Path, start: Start) -> None:
    """A numbered symlink to a directory elsewhere is aspired, with the symlink's path."""
    base = tmp_path / "m"
    make_version(base, 1)
    elsewhere = make_version(tmp_path / "store", "model-v2")
    (base / "2").symlink_to(elsewhere, target_is_directory=True)
    rig = start(monitor("m", base, ServableVersionPolicy.all()))
    rig.source.poll_once()
    [call] = rig.target.calls("m")
    assert call.version_numbers == (1, 2)
    assert call.versions[1].data == str(base / "2")


def test_dangling_symlink_is_ignored(tmp_path: Path, start: Start) -> None:
    """A numbered symlink whose target is gone is not a version (and breaks nothing)."""
    base = tmp_path / "m"
    make_version(base, 1)
    (base / "2").symlink_to(tmp_path / "gone", target_is_directory=True)
    rig = start(monitor("m", base, ServableVersionPolicy.all()))
    rig.source.poll_once()
    assert last_versions(rig.target, "m") == (1,)
    assert rig.source.servable_errors() == {}


def test_symlinked_base_path_is_followed(tmp_path: Path, start: Start) -> None:
    """A base path that is a symlink to a directory is listed like the directory."""
    real = tmp_path / "real"
    make_version(real, 4)
    (tmp_path / "link").symlink_to(real, target_is_directory=True)
    rig = start(monitor("m", tmp_path / "link"))
    rig.source.poll_once()
    assert last_versions(rig.target, "m") == (4,)


@pytest.mark.parametrize("first", ["1", "01"])
def test_duplicate_version_numbers_pick_one_directory_deterministically(
    tmp_path: Path, start: Start, first: str
) -> None:
    """``1`` and ``01`` both name version 1: the smaller path wins, whatever the creation order."""
    base = tmp_path / "m"
    for name in [first, "01" if first == "1" else "1"]:
        make_version(base, name)
    rig = start(monitor("m", base))
    for _ in range(3):
        rig.source.poll_once()
    assert {tuple(item.data for item in c.versions) for c in rig.target.calls("m")} == {
        (str(base / "01"),)
    }


_NAME_CHARS = st.characters(exclude_categories=["Cs"], exclude_characters="/\0")
_NAMES = st.one_of(
    st.from_regex(r"[0-9]{1,4}", fullmatch=True),
    st.text(_NAME_CHARS, min_size=1, max_size=6).filter(lambda n: n not in {".", ".."}),
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(children=st.dictionaries(_NAMES, st.booleans(), max_size=8))
def test_aspired_versions_are_exactly_the_numbered_directories(
    children: dict[str, bool],
) -> None:
    """Property: with policy ``all``, the versions are the int values of all-digit dir names."""
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        for name, is_dir in children.items():
            if is_dir:
                (base / name).mkdir()
            else:
                (base / name).write_text("")
        expected = {
            int(name)
            for name, is_dir in children.items()
            if is_dir and re.fullmatch(r"[0-9]+", name)
        }
        target: RecordingTarget[StoragePath] = RecordingTarget()
        source = FileSystemStoragePathSource(
            config(monitor("m", base, ServableVersionPolicy.all()))
        )
        connect(source, target)
        source.poll_once()
        source.close()
        assert last_versions(target, "m") == tuple(sorted(expected))


# --------------------------------------------------------------------------- version policies


def test_latest_one_is_the_default_policy(tmp_path: Path, start: Start) -> None:
    """Without a policy only the highest version is aspired."""
    base = tmp_path / "m"
    for v in (1, 3, 2):
        make_version(base, v)
    rig = start(monitor("m", base))
    rig.source.poll_once()
    assert last_versions(rig.target, "m") == (3,)


def test_latest_n_window_moves_as_versions_come_and_go(tmp_path: Path, start: Start) -> None:
    """latest(2) follows the two highest versions as versions are added and removed."""
    base = tmp_path / "m"
    for v in (1, 2, 3):
        make_version(base, v)
    rig = start(monitor("m", base, ServableVersionPolicy.latest(2)))
    rig.source.poll_once()
    seen = [last_versions(rig.target, "m")]
    for step, version in [("add", 4), ("add", 10), ("rm", 10), ("rm", 4), ("rm", 3), ("rm", 2)]:
        if step == "add":
            make_version(base, version)
        else:
            shutil.rmtree(base / str(version))
        rig.source.poll_once()
        seen.append(last_versions(rig.target, "m"))
    assert seen == [(2, 3), (3, 4), (4, 10), (3, 4), (2, 3), (1, 2), (1,)]


def test_all_policy_aspires_every_version(tmp_path: Path, start: Start) -> None:
    """all() aspires every version dir, old ones included."""
    base = tmp_path / "m"
    for v in (5, 1, 3):
        make_version(base, v)
    rig = start(monitor("m", base, ServableVersionPolicy.all()))
    rig.source.poll_once()
    make_version(base, 7)
    rig.source.poll_once()
    assert [c.version_numbers for c in rig.target.calls("m")] == [(1, 3, 5), (1, 3, 5, 7)]


def test_specific_policy_aspires_only_the_listed_versions_present(
    tmp_path: Path, start: Start
) -> None:
    """specific({2, 5}) aspires those of 2 and 5 on disk; a missing one is simply not aspired."""
    base = tmp_path / "m"
    for v in (1, 2, 3):
        make_version(base, v)
    rig = start(monitor("m", base, ServableVersionPolicy.specific([2, 5])))
    rig.source.poll_once()
    make_version(base, 5)
    rig.source.poll_once()
    shutil.rmtree(base / "2")
    rig.source.poll_once()
    assert [c.version_numbers for c in rig.target.calls("m")] == [(2,), (2, 5), (5,)]


# --------------------------------------------------------------------------- config updates


def test_added_servable_is_polled_before_update_config_returns(
    tmp_path: Path, start: Start
) -> None:
    """A servable added to a connected, polling source is emitted by update_config itself."""
    make_version(tmp_path / "a", 1)
    make_version(tmp_path / "b", 4)
    rig = start(monitor("a", tmp_path / "a"), period_s=0)
    rig.source.update_config(
        config(monitor("a", tmp_path / "a"), monitor("b", tmp_path / "b"), period_s=0)
    )
    assert last_versions(rig.target, "b") == (4,)
    assert [c.name for c in rig.target.calls()] == ["a", "b"]


def test_added_servable_waits_for_poll_once_when_the_source_never_polls(
    tmp_path: Path, start: Start
) -> None:
    """With a negative poll period, update_config emits nothing for a new servable."""
    make_version(tmp_path / "b", 4)
    rig = start(period_s=-1)
    rig.source.update_config(config(monitor("b", tmp_path / "b"), period_s=-1))
    assert rig.target.calls() == []
    rig.source.poll_once()
    assert last_versions(rig.target, "b") == (4,)


def test_removed_servable_gets_an_empty_set_and_is_no_longer_polled(
    tmp_path: Path, start: Start
) -> None:
    """Removing a servable emits its empty aspired set once; later polls leave it alone."""
    make_version(tmp_path / "a", 1)
    make_version(tmp_path / "b", 2)
    rig = start(monitor("a", tmp_path / "a"), monitor("b", tmp_path / "b"), period_s=0)
    rig.source.update_config(config(monitor("a", tmp_path / "a"), period_s=0))
    rig.source.poll_once()
    assert [c.version_numbers for c in rig.target.calls("b")] == [(2,), ()]
    assert last_versions(rig.target, "a") == (1,)


def test_removed_servable_is_unloaded_by_the_manager(
    tmp_path: Path, stepped: SteppedManager
) -> None:
    """Through an adapter and a manager, removing a servable from the config unloads it."""
    make_version(tmp_path / "a", 1)
    make_version(tmp_path / "b", 2)
    source = FileSystemStoragePathSource(
        config(monitor("a", tmp_path / "a"), monitor("b", tmp_path / "b"), period_s=0)
    )
    with source:
        connect(source, stepped.adapter)
        stepped.settle()
        assert stepped.available() == {ServableId("a", 1), ServableId("b", 2)}
        source.update_config(config(monitor("a", tmp_path / "a"), period_s=0))
        stepped.settle()
        assert stepped.available() == {ServableId("a", 1)}
        assert stepped.state("b", 2) is ManagerState.END


def test_changed_policy_is_applied_at_once(tmp_path: Path, start: Start) -> None:
    """Changing a servable's version policy re-polls it with the new policy."""
    base = tmp_path / "m"
    for v in (1, 2, 3):
        make_version(base, v)
    rig = start(monitor("m", base), period_s=0)
    rig.source.update_config(config(monitor("m", base, ServableVersionPolicy.all()), period_s=0))
    rig.source.update_config(
        config(monitor("m", base, ServableVersionPolicy.specific([1])), period_s=0)
    )
    assert [c.version_numbers for c in rig.target.calls("m")] == [(3,), (1, 2, 3), (1,)]


@pytest.mark.parametrize(
    "change",
    [{"file_system_poll_wait_seconds": 5.0}, {"watch_filesystem_events": False}],
    ids=["poll-period", "watch-events"],
)
def test_changing_poll_period_or_event_watching_is_rejected(
    tmp_path: Path, start: Start, change: dict[str, Any]
) -> None:
    """update_config refuses a new poll period or watch setting and keeps the old config."""
    make_version(tmp_path / "m", 1)
    rig = start(monitor("m", tmp_path / "m"), period_s=PERIOD_S)
    before = rig.source.config
    options: dict[str, Any] = {"file_system_poll_wait_seconds": PERIOD_S, **change}
    with pytest.raises(InvalidArgumentError, match="cannot change"):
        rig.source.update_config(
            FileSystemStoragePathSourceConfig(
                (monitor("m", tmp_path / "m"), monitor("n", tmp_path / "n")),
                **options,
            )
        )
    assert rig.source.config is before
    assert rig.target.calls("n") == []


def test_duplicate_servable_names_are_rejected(tmp_path: Path) -> None:
    """A config listing one servable name twice cannot be built."""
    with pytest.raises(InvalidArgumentError, match="listed twice"):
        config(monitor("m", tmp_path / "a"), monitor("m", tmp_path / "b"))


# --------------------------------------------------------------------------- faults


FAULTY = "faulty"
Heal = Callable[[], None]


def _missing(base: Path) -> Heal:
    base.rename(base.with_name("away"))

    def heal() -> None:
        base.with_name("away").rename(base)

    return heal


def _a_file(base: Path) -> Heal:
    base.rename(base.with_name("away"))
    base.write_text("not a directory")

    def heal() -> None:
        base.unlink()
        base.with_name("away").rename(base)

    return heal


def _parent_a_file(base: Path) -> Heal:
    parent = base.parent
    parent.rename(parent.with_name("parent-away"))
    parent.write_text("not a directory")

    def heal() -> None:
        parent.unlink()
        parent.with_name("parent-away").rename(parent)

    return heal


def _symlink_loop(base: Path) -> Heal:
    base.rename(base.with_name("away"))
    base.symlink_to(base)  # ELOOP on listing

    def heal() -> None:
        base.unlink()
        base.with_name("away").rename(base)

    return heal


def _unreadable(base: Path) -> Heal:
    if os.geteuid() == 0:
        pytest.skip("root ignores directory permissions (see the scandir-EACCES case)")
    base.chmod(0)
    return lambda: base.chmod(0o755)


def _fake_eacces(base: Path, monkeypatch: pytest.MonkeyPatch) -> Heal:
    # The only way to get EACCES as root: the listing call itself fails as the kernel would.
    real_scandir = os.scandir

    def scandir(path: Any) -> Any:
        if os.fspath(path) == str(base):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    return monkeypatch.undo


FAULTS: dict[str, tuple[Callable[..., Heal], StatusCode]] = {
    "base-missing": (_missing, StatusCode.NOT_FOUND),
    "base-is-a-file": (_a_file, StatusCode.INVALID_ARGUMENT),
    "parent-is-a-file": (_parent_a_file, StatusCode.INVALID_ARGUMENT),
    "base-is-a-symlink-loop": (_symlink_loop, StatusCode.UNAVAILABLE),
    "base-chmod-000": (_unreadable, StatusCode.PERMISSION_DENIED),
    "scandir-eacces": (_fake_eacces, StatusCode.PERMISSION_DENIED),
}


@pytest.mark.parametrize("fault", FAULTS)
def test_base_path_fault_affects_only_its_servable(
    tmp_path: Path,
    start: Start,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    fault: str,
) -> None:
    """A broken base path is reported for its servable only; others go on, the thread lives."""
    inflict, code = FAULTS[fault]
    good, bad = tmp_path / "good", tmp_path / "parent" / FAULTY
    make_version(good, 1)
    make_version(bad, 1)
    rig = start(monitor("good", good), monitor(FAULTY, bad), period_s=PERIOD_S)
    assert rig.source.polling
    heal = inflict(bad, monkeypatch) if inflict is _fake_eacces else inflict(bad)
    make_version(good, 2)
    faulty_calls = len(rig.target.calls(FAULTY))
    with caplog.at_level(logging.WARNING):
        rig.source.poll_once()

    assert last_versions(rig.target, "good") == (2,)
    assert len(rig.target.calls(FAULTY)) == faulty_calls  # nothing emitted, nothing unloaded
    errors = rig.source.servable_errors()
    assert list(errors) == [FAULTY]
    assert errors[FAULTY].code is code
    assert str(bad) in errors[FAULTY].message
    assert FAULTY in errors[FAULTY].message
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert any(str(bad) in m for m in logged)
    assert not any("good" in m for m in logged)
    assert rig.source.polling

    heal()
    make_version(bad, 3)
    rig.source.poll_once()
    assert last_versions(rig.target, FAULTY) == (3,)
    assert rig.source.servable_errors() == {}
    assert rig.source.polling


def test_missing_base_path_keeps_serving_what_was_loaded(
    tmp_path: Path, stepped: SteppedManager
) -> None:
    """A base path that disappears unloads nothing: the manager keeps the version available."""
    base = tmp_path / "m"
    make_version(base, 1)
    source = FileSystemStoragePathSource(
        config(monitor("m", base), period_s=PERIOD_S), clock=FakeClock()
    )
    with source:
        connect(source, stepped.adapter)
        stepped.settle()
        # Renamed away, atomically: an rmtree would empty the directory first, and an event
        # poll seeing it empty rightly unloads (see the servable_versions_always_present tests).
        base.rename(tmp_path / "away")
        source.poll_once()
        stepped.settle()
        assert source.servable_errors()["m"].code is StatusCode.NOT_FOUND
        assert stepped.available() == {ServableId("m", 1)}
        assert source.polling


def test_a_changed_storage_condition_is_published_once_after_its_findings(
    tmp_path: Path, stepped: SteppedManager
) -> None:
    """storage_conditions tells each change of a base path's condition once, errors current."""
    base = tmp_path / "m"
    make_version(base, 1)
    source = FileSystemStoragePathSource(
        config(monitor("m", base), period_s=PERIOD_S), clock=FakeClock()
    )
    seen: list[tuple[StatusCode | None, bool, bool]] = []

    def on_condition(condition: StorageCondition) -> None:
        code = condition.error.code if condition.error is not None else None
        listed = "m" in source.servable_errors()
        seen.append((code, condition.holds_no_version, listed))

    with source, source.storage_conditions.subscribe(on_condition):
        connect(source, stepped.adapter)
        stepped.settle()
        assert seen == []  # versions there: nothing to say
        base.rename(tmp_path / "away")
        source.poll_once()
        source.poll_once()
        assert seen == [(StatusCode.NOT_FOUND, False, True)]
        (tmp_path / "m").mkdir()
        source.poll_once()
        assert seen[1:] == [(None, True, False)]
        assert source.holds_no_version("m")
        source.update_config(config(period_s=PERIOD_S))
        assert seen[2:] == [(None, False, False)]  # no longer watched: clear


def test_looked_at_is_deprecated_and_still_names_each_look(tmp_path: Path) -> None:
    """looked_at warns, pointing at storage_conditions, and still names the servable per look."""
    make_version(tmp_path / "m", 1)
    with FileSystemStoragePathSource(config(monitor("m", tmp_path / "m"))) as source:
        with pytest.warns(DeprecationWarning, match="storage_conditions"):
            looked = source.looked_at
        seen: list[str] = []
        with looked.subscribe(seen.append):
            source.poll_once()
            source.poll_once()
    assert seen == ["m", "m"]


def test_an_object_store_base_path_is_refused_naming_the_remote_source(tmp_path: Path) -> None:
    """An s3:// base path is no directory: the file-system source refuses it at once."""
    with pytest.raises(InvalidArgumentError, match="RemoteStoragePathSource"):
        FileSystemStoragePathSource(config(ServableToMonitor("m", "s3://bucket/m")))
    with (
        FileSystemStoragePathSource(config()) as source,
        pytest.raises(InvalidArgumentError, match="RemoteStoragePathSource"),
    ):
        source.update_config(config(ServableToMonitor("m", "s3://bucket/m")))


def test_version_dir_deleted_while_serving_is_unloaded(
    tmp_path: Path, stepped: SteppedManager
) -> None:
    """A version dir deleted while served is left out of the next poll and unloaded."""
    base = tmp_path / "m"
    make_version(base, 1)
    make_version(base, 2)
    source = FileSystemStoragePathSource(
        config(monitor("m", base, ServableVersionPolicy.all()), period_s=PERIOD_S),
        clock=FakeClock(),
    )
    with source:
        connect(source, stepped.adapter)
        stepped.settle()
        assert stepped.available() == {ServableId("m", 1), ServableId("m", 2)}
        shutil.rmtree(base / "2")
        source.poll_once()
        stepped.settle()
        assert stepped.available() == {ServableId("m", 1)}
        assert stepped.state("m", 2) is ManagerState.END
        assert source.servable_errors() == {}
        assert source.polling


def test_version_dir_replaced_by_a_file_is_dropped(tmp_path: Path, start: Start) -> None:
    """A version dir that becomes a regular file is no longer aspired; the others stay."""
    base = tmp_path / "m"
    make_version(base, 1)
    make_version(base, 2)
    make_version(tmp_path / "other", 1)
    rig = start(
        monitor("m", base, ServableVersionPolicy.all()),
        monitor("other", tmp_path / "other"),
        period_s=PERIOD_S,
    )
    shutil.rmtree(base / "2")
    (base / "2").write_text("oops")
    rig.source.poll_once()
    assert last_versions(rig.target, "m") == (1,)
    assert last_versions(rig.target, "other") == (1,)
    assert rig.source.servable_errors() == {}
    assert rig.source.polling


# --------------------------------------------------------------------------- always present


@pytest.mark.parametrize(
    ("empty", "code"),
    [
        (lambda base: shutil.rmtree(base / "1"), StatusCode.FAILED_PRECONDITION),
        (shutil.rmtree, StatusCode.NOT_FOUND),
    ],
    ids=["empty-base-path", "missing-base-path"],
)
def test_versions_always_present_reports_instead_of_unloading(
    tmp_path: Path, stepped: SteppedManager, empty: Callable[[Path], None], code: StatusCode
) -> None:
    """With servable_versions_always_present, no versions on disk is an error, not an unload."""
    base = tmp_path / "m"
    make_version(base, 1)
    make_version(tmp_path / "other", 1)
    source = FileSystemStoragePathSource(
        config(
            monitor("m", base),
            monitor("other", tmp_path / "other"),
            period_s=PERIOD_S,
            servable_versions_always_present=True,
        ),
        clock=FakeClock(),
    )
    with source:
        connect(source, stepped.adapter)
        stepped.settle()
        empty(base)
        source.poll_once()
        stepped.settle()
        error = source.servable_errors()["m"]
        assert error.code is code
        assert str(base) in error.message
        assert list(source.servable_errors()) == ["m"]
        assert stepped.available() == {ServableId("m", 1), ServableId("other", 1)}
        assert stepped.state("m", 1) is ManagerState.AVAILABLE
        assert source.polling


def test_versions_always_present_emits_nothing_for_an_empty_base_path(
    tmp_path: Path, start: Start
) -> None:
    """With the flag, an emptied base path emits no set at all for its servable."""
    base = tmp_path / "m"
    make_version(base, 1)
    rig = start(monitor("m", base), period_s=PERIOD_S, servable_versions_always_present=True)
    shutil.rmtree(base / "1")
    rig.source.poll_once()
    # (1,) again, with a new revision, if an event-driven poll saw the files go before the directory
    assert {c.version_numbers for c in rig.target.calls("m")} == {(1,)}
    assert rig.source.servable_errors()["m"].code is StatusCode.FAILED_PRECONDITION


def test_without_always_present_an_empty_base_path_unloads(
    tmp_path: Path, stepped: SteppedManager
) -> None:
    """Without the flag, an emptied base path emits an empty set and the version is unloaded."""
    base = tmp_path / "m"
    make_version(base, 1)
    source = FileSystemStoragePathSource(
        config(monitor("m", base), period_s=PERIOD_S), clock=FakeClock()
    )
    with source:
        connect(source, stepped.adapter)
        stepped.settle()
        shutil.rmtree(base / "1")
        source.poll_once()
        stepped.settle()
        assert source.servable_errors() == {}
        assert stepped.available() == set()
        assert stepped.state("m", 1) is ManagerState.END


# --------------------------------------------------------------------------- safe publication


def test_version_renamed_into_place_is_picked_up_only_after_the_rename(
    tmp_path: Path, start: Start
) -> None:
    """A version written as ``2.tmp`` is ignored until renamed to ``2``."""
    base = tmp_path / "m"
    make_version(base, 1)
    rig = start(monitor("m", base))
    staging = base / "2.tmp"
    staging.mkdir()
    for file in ["saved_model.pb", "variables.index", "variables.data"]:
        (staging / file).write_text(file)
        rig.source.poll_once()
    staging.rename(base / "2")
    rig.source.poll_once()
    assert [c.version_numbers for c in rig.target.calls("m")] == [(1,)] * 3 + [(2,)]
    assert [item.data for item in rig.target.calls("m")[-1].versions] == [str(base / "2")]


def test_done_marker_holds_back_a_version_copied_file_by_file(tmp_path: Path, start: Start) -> None:
    """With version_done_marker, a version dir is aspired only once its marker exists."""
    base = tmp_path / "m"
    make_version(base, 1, files=["saved_model.pb", "DONE"])
    rig = start(monitor("m", base), version_done_marker="DONE")
    rig.source.poll_once()
    copying = base / "2"
    copying.mkdir()
    rig.source.poll_once()
    for file in ["saved_model.pb", "variables.index", "variables.data", "assets.txt"]:
        (copying / file).write_text(file)
        rig.source.poll_once()
    assert [c.version_numbers for c in rig.target.calls("m")] == [(1,)] * 6
    (copying / "DONE").write_text("")
    rig.source.poll_once()
    assert last_versions(rig.target, "m") == (2,)


def test_done_marker_is_required_of_every_version(tmp_path: Path, start: Start) -> None:
    """With version_done_marker, a complete-looking version without the marker is never aspired."""
    base = tmp_path / "m"
    make_version(base, 1, files=["saved_model.pb", "DONE"])
    make_version(base, 2)
    rig = start(monitor("m", base, ServableVersionPolicy.all()), version_done_marker="DONE")
    rig.source.poll_once()
    assert last_versions(rig.target, "m") == (1,)


# --------------------------------------------------------------------------- watchdog pickup


def _wait_for_version(rig: Rig, name: str, version: int) -> AspiredVersionsCall[StoragePath]:
    wait_until(
        lambda: first_with(rig.target, name, version) is not None,
        PICKUP_TIMEOUT_S,
        f"{name} version {version} not aspired within {PICKUP_TIMEOUT_S} s",
    )
    call = first_with(rig.target, name, version)
    assert call is not None
    return call


def test_watchdog_picks_up_a_renamed_version_within_a_second(tmp_path: Path, start: Start) -> None:
    """With a 60 s poll period, a version renamed into place is aspired within 1 s."""
    base = tmp_path / "m"
    make_version(base, 1)
    make_version(tmp_path / "other", 1)
    rig = start(monitor("m", base), monitor("other", tmp_path / "other"), period_s=PERIOD_S)
    staging = make_version(base, "2.tmp")
    renamed_at = time.perf_counter()
    staging.rename(base / "2")
    call = _wait_for_version(rig, "m", 2)
    assert call.time_s - renamed_at <= PICKUP_TARGET_S
    assert call.version_numbers == (2,)
    assert rig.clock.pending_timers == 1  # no full poll happened: the event did it
    assert [c.version_numbers for c in rig.target.calls("other")] == [(1,)]  # only "m" was polled


def test_watchdog_picks_up_a_done_marker_within_a_second(tmp_path: Path, start: Start) -> None:
    """With a done marker, creating the marker inside a version dir triggers its pickup."""
    base = tmp_path / "m"
    make_version(base, 1, files=["saved_model.pb", "DONE"])
    rig = start(monitor("m", base), period_s=PERIOD_S, version_done_marker="DONE")
    version = make_version(base, 2, files=["saved_model.pb", "variables.data"])
    rig.source.poll_once()  # the copy so far is not aspired...
    assert first_with(rig.target, "m", 2) is None
    marked_at = time.perf_counter()
    (version / "DONE").write_text("")
    call = _wait_for_version(rig, "m", 2)  # ...the marker's event gets it picked up
    assert call.time_s - marked_at <= PICKUP_TARGET_S


def test_base_path_created_after_start_is_found_by_the_next_full_poll(
    tmp_path: Path, start: Start
) -> None:
    """A base path that appears later is polled on the next period, then watched too."""
    base = tmp_path / "m"
    rig = start(monitor("m", base), period_s=PERIOD_S)
    assert rig.source.servable_errors()["m"].code is StatusCode.NOT_FOUND
    make_version(base, 1)
    rig.clock.advance(PERIOD_S)
    _wait_for_version(rig, "m", 1)
    assert rig.source.servable_errors() == {}
    # The poll ends by watching the new base path, then schedules the next one.
    wait_until(lambda: rig.clock.pending_timers == 1, PICKUP_TIMEOUT_S)
    make_version(base, "2.tmp").rename(base / "2")
    _wait_for_version(rig, "m", 2)


def test_base_path_replaced_is_watched_again_after_the_next_full_poll(
    tmp_path: Path, start: Start
) -> None:
    """A base path deleted and recreated between polls regains instant pickup at the next poll."""
    base = tmp_path / "m"
    make_version(base, 1)
    rig = start(monitor("m", base), period_s=PERIOD_S)
    shutil.rmtree(base)  # e.g. a deployment that replaces the model directory whole
    # The deletion's events reach the source (its event poll finds the base path missing)...
    wait_until(lambda: "m" in rig.source.servable_errors(), PICKUP_TIMEOUT_S)
    # ...and so does the watched directory's own deletion (its watch is marked lost)...
    wait_until(lambda: bool(rig.source._events._lost), PICKUP_TIMEOUT_S)
    make_version(base, 1)  # ...before the directory is recreated.
    rig.clock.advance(PERIOD_S)
    wait_until(lambda: rig.clock.pending_timers == 1, PICKUP_TIMEOUT_S)
    make_version(base, "2.tmp").rename(base / "2")
    _wait_for_version(rig, "m", 2)


class _HookedLock:
    """Wraps a lock; runs ``hook`` once, on the polling thread, just before it takes the lock.

    ``poll_done`` is set when the polling thread releases the lock it took after the hook.
    """

    def __init__(self, lock: Any, hook: Callable[[], None]) -> None:
        self._lock = lock
        self._hook: Callable[[], None] | None = hook
        self._armed = False  # the hook ran; the polling thread's next release ends its poll
        self.poll_done = threading.Event()

    def __enter__(self) -> bool:
        if threading.current_thread().name == FS_THREAD and self._hook is not None:
            hook, self._hook = self._hook, None
            hook()  # takes and releases this lock itself, before _armed is set
            self._armed = True
        return bool(self._lock.__enter__())

    def __exit__(self, *exc: object) -> None:
        self._lock.__exit__(*exc)
        if threading.current_thread().name == FS_THREAD and self._armed:
            self.poll_done.set()


def test_servable_removed_during_an_event_poll_stays_removed(tmp_path: Path, start: Start) -> None:
    """A servable removed from the config while its event poll waits is not aspired again."""
    make_version(tmp_path / "a", 1)
    make_version(tmp_path / "b", 1)
    rig = start(monitor("a", tmp_path / "a"), monitor("b", tmp_path / "b"), period_s=PERIOD_S)
    only_b = config(monitor("b", tmp_path / "b"), period_s=PERIOD_S)
    # Deterministic interleaving: the config changes after the polling thread has chosen what
    # to poll for an event on "a", and before it polls.
    hooked = _HookedLock(rig.source._poll_lock, lambda: rig.source.update_config(only_b))
    rig.source._poll_lock = hooked  # type: ignore[assignment]
    make_version(tmp_path / "a", 2)
    assert hooked.poll_done.wait(PICKUP_TIMEOUT_S)
    assert last_versions(rig.target, "a") == ()


# --------------------------------------------------------------------------- periodic polling


def test_full_poll_happens_each_period_and_not_before(tmp_path: Path, start: Start) -> None:
    """Without events, a new version is seen only when the FakeClock reaches the poll period."""
    base = tmp_path / "m"
    make_version(base, 1)
    rig = start(monitor("m", base), period_s=PERIOD_S, watch_filesystem_events=False)
    assert [c.version_numbers for c in rig.target.calls("m")] == [(1,)]  # polled at connect
    for version in (2, 3):
        make_version(base, version)
        rig.clock.advance(PERIOD_S - 0.5)
        assert rig.clock.pending_timers == 1  # not due: the polling thread was not woken
        assert first_with(rig.target, "m", version) is None
        rig.clock.advance(0.5)
        _wait_for_version(rig, "m", version)
        wait_until(lambda: rig.clock.pending_timers == 1, PICKUP_TIMEOUT_S)  # next one scheduled
    assert [c.version_numbers for c in rig.target.calls("m")] == [(1,), (2,), (3,)]
    assert rig.source.polling


class DelayRecordingClock(Clock):
    """A FakeClock that records the delay of each timer set.  Thread-safe."""

    def __init__(self) -> None:
        self.fake = FakeClock()
        self.delays: list[float] = []

    def now(self) -> float:
        return self.fake.now()

    def call_later(self, delay_s: float, callback: Callable[[], None]) -> Timer:
        self.delays.append(delay_s)
        return self.fake.call_later(delay_s, callback)


def test_a_full_poll_costly_for_its_period_is_followed_by_a_longer_pause(tmp_path: Path) -> None:
    """A full poll taking more CPU than a tenth of the period pauses nine times its CPU time, so
    polling many servables takes at most a tenth of a core."""
    servables = []
    for i in range(200):
        make_version(tmp_path / f"m{i}", 1)
        servables.append(monitor(f"m{i}", tmp_path / f"m{i}"))
    clock = DelayRecordingClock()
    period_s = 0.0001  # a full poll of 200 base paths costs far more than 10 microseconds
    with FileSystemStoragePathSource(
        config(*servables, period_s=period_s, watch_filesystem_events=False), clock=clock
    ) as source:
        connect(source, RecordingTarget())
        assert clock.delays == [period_s]  # after the poll at connect (not timed)
        clock.fake.advance(period_s)
        wait_until(lambda: len(clock.delays) == 2, PICKUP_TIMEOUT_S)
        assert clock.delays[1] > 10 * period_s


def test_zero_poll_period_polls_once_at_connect_without_a_thread(
    tmp_path: Path, start: Start
) -> None:
    """file_system_poll_wait_seconds=0 polls when connected, then never by itself."""
    base = tmp_path / "m"
    make_version(base, 1)
    threads_before = len(fs_threads())
    rig = start(monitor("m", base), period_s=0)
    assert last_versions(rig.target, "m") == (1,)
    assert not rig.source.polling
    assert len(fs_threads()) == threads_before
    assert rig.clock.pending_timers == 0
    make_version(base, 2)
    rig.clock.advance(10 * PERIOD_S)
    assert [c.version_numbers for c in rig.target.calls("m")] == [(1,)]


def test_negative_poll_period_never_polls_by_itself(tmp_path: Path, start: Start) -> None:
    """A negative poll period emits nothing at connect; only poll_once polls."""
    base = tmp_path / "m"
    make_version(base, 1)
    rig = start(monitor("m", base), period_s=-1)
    assert rig.target.calls() == []
    assert not rig.source.polling
    assert rig.clock.pending_timers == 0
    rig.source.poll_once()
    assert last_versions(rig.target, "m") == (1,)


def test_emissions_before_connect_are_delivered_on_connect(tmp_path: Path, start: Start) -> None:
    """poll_once before connect keeps the latest set per name and hands it over on connect."""
    base = tmp_path / "m"
    make_version(base, 1)
    rig = start(monitor("m", base), period_s=-1, connected=False)
    rig.source.poll_once()
    make_version(base, 2)
    rig.source.poll_once()
    connect(rig.source, rig.target)
    assert [c.version_numbers for c in rig.target.calls("m")] == [(2,)]


# --------------------------------------------------------------------------- close


def test_close_is_idempotent_stops_the_thread_and_emits_nothing_more(
    tmp_path: Path, start: Start
) -> None:
    """close() stops the polling thread and its timer; calling it again is harmless."""
    base = tmp_path / "m"
    make_version(base, 1)
    rig = start(monitor("m", base), period_s=PERIOD_S)
    loop = rig.source._loop
    assert loop is not None
    assert loop.running
    rig.source.close()
    rig.source.close()
    assert not loop.running
    assert not rig.source.polling
    assert rig.clock.pending_timers == 0
    make_version(base, "2.tmp").rename(base / "2")
    rig.clock.advance(10 * PERIOD_S)
    assert [c.version_numbers for c in rig.target.calls("m")] == [(1,)]


def test_context_manager_closes_the_source(tmp_path: Path) -> None:
    """Leaving a ``with`` block closes the source and its polling thread."""
    make_version(tmp_path / "m", 1)
    source = FileSystemStoragePathSource(
        config(monitor("m", tmp_path / "m"), period_s=PERIOD_S), clock=FakeClock()
    )
    with source:
        connect(source, RecordingTarget[StoragePath]())
        assert source.polling
    assert not source.polling


def test_poll_once_after_close_emits_nothing(tmp_path: Path, start: Start) -> None:
    """Per close()'s contract ("emits nothing more"), a late poll_once() emits nothing."""
    base = tmp_path / "m"
    make_version(base, 1)
    rig = start(monitor("m", base), period_s=PERIOD_S)
    rig.source.close()
    make_version(base, 2)
    rig.source.poll_once()
    assert [c.version_numbers for c in rig.target.calls("m")] == [(1,)]


# --------------------------------------------------------------------------- bare models


def _holds_saved_model(path: str) -> str | None:
    return None if os.path.exists(os.path.join(path, "saved_model.pb")) else "no saved_model.pb"


def test_a_bare_model_is_version_0_until_a_numbered_version_comes(
    tmp_path: Path, start: Start
) -> None:
    """A model in the base path itself is version 0; a numbered version then replaces it."""
    base = tmp_path / "m"
    base.mkdir()
    (base / "saved_model.pb").write_text("model")
    rig = start(ServableToMonitor("m", str(base), version_check=_holds_saved_model))
    rig.source.poll_once()
    [call] = rig.target.calls("m")
    assert (call.version_numbers, call.versions[0].data) == ((0,), str(base))
    assert rig.source.servable_errors() == {}
    make_version(base, 1)
    rig.source.poll_once()
    assert rig.target.calls("m")[-1].version_numbers == (1,)
    assert rig.target.calls("m")[-1].versions[0].data == str(base / "1")


def test_a_base_path_is_a_bare_model_only_when_its_check_passes(
    tmp_path: Path, start: Start
) -> None:
    """Files that are no complete model, or a servable without a check, give no version 0."""
    checked, unchecked = tmp_path / "checked", tmp_path / "unchecked"
    for base in (checked, unchecked):
        base.mkdir()
        (base / "variables.tmp").write_text("half a model")
    (unchecked / "saved_model.pb").write_text("model")
    rig = start(
        ServableToMonitor("checked", str(checked), version_check=_holds_saved_model),
        ServableToMonitor("unchecked", str(unchecked)),
    )
    rig.source.poll_once()
    assert last_versions(rig.target, "checked") == ()
    assert last_versions(rig.target, "unchecked") == ()
