"""Tests for the example VocabularyLoader and word_id (docs/guides/writing-a-loader.md).

Run: .venv/bin/python -m pytest docs/examples/test_my_loader.py -q -p no:cacheprovider
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from my_loader import VocabularyLoader, word_id

from servinglib import (
    AspiredVersionsManager,
    AvailabilityPreservingPolicy,
    Loader,
    LoadRetryOptions,
    ManagerOptions,
    ManagerState,
    ResourceAllocation,
    ServableData,
    ServableId,
    ServableStateMonitor,
    StatusCode,
)
from servinglib.errors import FailedPreconditionError, UnavailableError
from servinglib.testing import FakeClock, FakeLoader, LiveCounter, run_until, wait_for_state

ID = ServableId("vocab", 1)
RETRY_INTERVAL_S = 30.0
TIMEOUT_S = 10.0


def aspire(manager: AspiredVersionsManager, loader: Loader, version: int = 1) -> None:
    """Makes ``loader`` the only aspired version of "vocab"."""
    manager.set_aspired_versions("vocab", [ServableData.of(ServableId("vocab", version), loader)])


# -- the loader on its own ----------------------------------------------------------------


def test_load_reads_the_words_and_unload_releases_them(tmp_path: Path) -> None:
    """load() maps each word to its position; after unload() servable() refuses."""
    path = tmp_path / "vocab.txt"
    path.write_text("hello\nworld\n", encoding="utf-8")
    loader = VocabularyLoader(path, max_bytes=1_000)

    loader.load()
    assert loader.servable() == {"hello": 0, "world": 1}
    loader.unload()
    with pytest.raises(FailedPreconditionError):
        loader.servable()


def test_estimate_is_known_before_the_file_exists(tmp_path: Path) -> None:
    """estimate_resources() reads no file, so it is cheap and never changes."""
    loader = VocabularyLoader(tmp_path / "missing.txt", max_bytes=1_000)
    assert loader.estimate_resources() == ResourceAllocation.ram_bytes(1_000)


# -- the loader under a manager, with a fake clock ----------------------------------------


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def manager(clock: FakeClock) -> Iterator[AspiredVersionsManager]:
    """A manager the test steps by hand: no manage-state thread, loads run on the test thread."""
    retry = LoadRetryOptions(max_num_load_retries=3, load_retry_interval_s=RETRY_INTERVAL_S)
    with AspiredVersionsManager(
        AvailabilityPreservingPolicy(),
        ManagerOptions(load_retry=retry),
        manage_state_interval_s=None,
        clock=clock,
    ) as manager:
        yield manager


@pytest.fixture
def monitor(manager: AspiredVersionsManager) -> Iterator[ServableStateMonitor]:
    monitor = ServableStateMonitor(manager.event_bus)
    yield monitor
    monitor.close()


def test_missing_file_is_retried_until_it_appears(
    tmp_path: Path,
    clock: FakeClock,
    manager: AspiredVersionsManager,
    monitor: ServableStateMonitor,
) -> None:
    """A missing file fails with UNAVAILABLE, which is retried once the interval passes."""
    path = tmp_path / "vocab.txt"
    aspire(manager, VocabularyLoader(path, max_bytes=1_000))
    run_until(manager, lambda: clock.pending_timers == 1)  # attempt 1 failed, retry scheduled

    path.write_text("hello\n", encoding="utf-8")
    clock.advance(RETRY_INTERVAL_S)  # with 0 load threads the retry runs here, in advance()
    wait_for_state(monitor, ID, ManagerState.AVAILABLE)
    assert word_id(manager, "vocab", "hello") == 0


def test_corrupt_file_fails_without_retries(
    tmp_path: Path,
    clock: FakeClock,
    manager: AspiredVersionsManager,
    monitor: ServableStateMonitor,
) -> None:
    """A file that is not UTF-8 fails with DATA_LOSS at once: no retry is scheduled."""
    path = tmp_path / "vocab.txt"
    path.write_bytes(b"\xff\xfe not utf-8")
    aspire(manager, VocabularyLoader(path, max_bytes=1_000))
    manager.run_once()  # manages the version and runs its one load attempt, on this thread

    wait_for_state(monitor, ID, ManagerState.END)
    state = monitor.get_state(ID)
    assert state is not None
    assert state.health is not None
    assert state.health.code is StatusCode.DATA_LOSS
    assert clock.pending_timers == 0


# -- code that uses loaded servables, with FakeLoader -------------------------------------


def test_word_id_is_unavailable_until_the_vocabulary_loads() -> None:
    """While the only version loads, word_id raises UnavailableError; then it answers."""
    gate = threading.Event()
    loader = FakeLoader({"hello": 0}, load_gate=gate)
    with AspiredVersionsManager(
        AvailabilityPreservingPolicy(),
        ManagerOptions(num_load_threads=1),
        manage_state_interval_s=None,
    ) as manager:
        monitor = ServableStateMonitor(manager.event_bus)
        aspire(manager, loader)
        manager.run_once()  # hands the load to the load thread, where it blocks on the gate
        assert loader.load_started.wait(TIMEOUT_S)
        with pytest.raises(UnavailableError, match="vocab"):
            word_id(manager, "vocab", "hello")

        gate.set()
        wait_for_state(monitor, ID, ManagerState.AVAILABLE)
        assert word_id(manager, "vocab", "hello") == 0
        monitor.close()


def test_word_id_answers_throughout_a_version_swap() -> None:
    """With the availability-preserving policy, some version serves after every step."""
    live = LiveCounter()
    with AspiredVersionsManager(AvailabilityPreservingPolicy(), manage_state_interval_s=None) as m:
        aspire(m, FakeLoader({"hello": 1}, live_counter=live), version=1)
        run_until(m, lambda: m.list_available_servable_ids() == [ServableId("vocab", 1)])

        aspire(m, FakeLoader({"hello": 2}, live_counter=live), version=2)
        answers: list[int] = []

        def swapped() -> bool:
            answers.append(word_id(m, "vocab", "hello"))  # raises if nothing serves
            return m.list_available_servable_ids() == [ServableId("vocab", 2)]

        run_until(m, swapped)
    assert answers[0] == 1
    assert answers[-1] == 2
    assert live.peak == 2  # both versions were loaded at once during the swap
    assert live.live == 0  # close() unloaded everything
