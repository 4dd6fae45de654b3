"""Tests for servinglib.testing.FakeLoader and LiveCounter: scripted loads, gates, counts."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest

from servinglib.core.loader import Loader
from servinglib.core.resources import ResourceAllocation
from servinglib.errors import FailedPreconditionError, UnavailableError
from servinglib.testing import FakeLoader, LiveCounter

TIMEOUT_S = 10.0
# How long a check that something does *not* happen watches for it.
NOTHING_HAPPENS_S = 0.05


def start_thread(target: Callable[[], None]) -> threading.Thread:
    """Starts a daemon thread running ``target`` (a daemon, so a failed test cannot hang exit)."""
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def join(thread: threading.Thread) -> None:
    thread.join(TIMEOUT_S)
    assert not thread.is_alive(), f"{thread.name} did not finish within {TIMEOUT_S} s"


def test_is_a_loader() -> None:
    """FakeLoader implements the Loader interface."""
    assert isinstance(FakeLoader(), Loader)


def test_starts_unloaded_with_zero_counts() -> None:
    """A new FakeLoader has made no calls and is not loaded."""
    loader = FakeLoader()

    assert loader.load_calls == 0
    assert loader.unload_calls == 0
    assert not loader.loaded
    assert not loader.load_started.is_set()


def test_load_serves_and_unload_counts() -> None:
    """load() makes servable() return the given object; load and unload calls are counted."""
    served = {"model": "m"}
    loader = FakeLoader(served)

    loader.load()
    assert loader.loaded
    assert loader.load_calls == 1
    assert loader.load_started.is_set()
    assert loader.servable() is served

    loader.unload()
    assert (loader.loaded, loader.load_calls, loader.unload_calls) == (False, 1, 1)


def test_default_servable_is_a_fresh_object() -> None:
    """Without a servable, each FakeLoader serves its own distinct object."""
    first, second = FakeLoader(), FakeLoader()
    first.load()
    second.load()

    assert first.servable() is not None
    assert first.servable() is not second.servable()


def test_servable_before_load_raises() -> None:
    """servable() before any load raises FailedPreconditionError."""
    with pytest.raises(FailedPreconditionError, match="not loaded"):
        FakeLoader().servable()


def test_servable_after_unload_raises() -> None:
    """servable() after unload raises FailedPreconditionError again."""
    loader = FakeLoader("s")
    loader.load()
    loader.unload()

    with pytest.raises(FailedPreconditionError):
        loader.servable()


def test_resource_estimate_defaults_to_empty() -> None:
    """estimate_resources() is the given allocation, or empty when none is given."""
    estimate = ResourceAllocation.ram_bytes(1000)

    assert FakeLoader(resource_estimate=estimate).estimate_resources() == estimate
    assert FakeLoader().estimate_resources() == ResourceAllocation.empty()


def test_load_error_fails_every_load() -> None:
    """load_error is raised by every load(), which leaves the loader unloaded."""
    error = UnavailableError("disk gone")
    loader = FakeLoader(load_error=error)

    for attempt in range(1, 4):
        with pytest.raises(UnavailableError) as raised:
            loader.load()
        assert raised.value is error
        assert loader.load_calls == attempt
        assert not loader.loaded
    with pytest.raises(FailedPreconditionError):
        loader.servable()


def test_load_errors_fail_the_first_loads_in_order_then_succeed() -> None:
    """load_errors are raised by the first loads, one each, in order; later loads succeed."""
    first, second = UnavailableError("first"), UnavailableError("second")
    loader = FakeLoader("s", load_errors=[first, second])

    for expected in (first, second):
        with pytest.raises(UnavailableError) as raised:
            loader.load()
        assert raised.value is expected
        assert not loader.loaded

    loader.load()
    assert loader.loaded
    assert loader.load_calls == 3
    assert loader.servable() == "s"


def test_scripted_errors_come_before_load_error() -> None:
    """With both, the scripted load_errors are raised first, then load_error for good."""
    scripted, permanent = UnavailableError("scripted"), UnavailableError("permanent")
    loader = FakeLoader(load_errors=[scripted], load_error=permanent)

    with pytest.raises(UnavailableError, match="scripted"):
        loader.load()
    for _ in range(2):
        with pytest.raises(UnavailableError, match="permanent"):
            loader.load()


def test_load_gate_blocks_load_until_set() -> None:
    """With load_gate, load() signals load_started and then blocks until the gate is set."""
    gate = threading.Event()
    loader = FakeLoader("s", load_gate=gate)
    thread = start_thread(loader.load)

    assert loader.load_started.wait(TIMEOUT_S)
    assert thread.is_alive()
    assert not loader.loaded
    with pytest.raises(FailedPreconditionError):
        loader.servable()

    gate.set()
    join(thread)
    assert (loader.loaded, loader.servable()) == (True, "s")


def test_load_gate_then_scripted_error() -> None:
    """A gated load that is scripted to fail fails only once the gate opens."""
    gate = threading.Event()
    loader = FakeLoader(load_gate=gate, load_errors=[UnavailableError("late failure")])
    errors: list[BaseException] = []

    def load() -> None:
        try:
            loader.load()
        except UnavailableError as error:
            errors.append(error)

    thread = start_thread(load)
    assert loader.load_started.wait(TIMEOUT_S)
    assert errors == []

    gate.set()
    join(thread)
    assert [str(error) for error in errors] == ["late failure"]
    assert not loader.loaded


def test_unload_gate_blocks_unload_until_set() -> None:
    """With unload_gate, unload() blocks until the gate is set; it stays loaded till then."""
    gate = threading.Event()
    loader = FakeLoader("s", unload_gate=gate)
    loader.load()
    thread = start_thread(loader.unload)

    # A bounded check that nothing happens: a blocked unload never finishes on its own.
    thread.join(NOTHING_HAPPENS_S)
    assert thread.is_alive()
    assert loader.loaded
    assert loader.unload_calls == 0

    gate.set()
    join(thread)
    assert (loader.loaded, loader.unload_calls) == (False, 1)


def test_load_delay_still_loads() -> None:
    """load_delay_s makes load() take at least that long, then load normally."""
    loader = FakeLoader("s", load_delay_s=0.01)

    started = time.perf_counter()
    loader.load()

    assert time.perf_counter() - started >= 0.01
    assert loader.loaded


def test_live_counter_starts_at_zero() -> None:
    """A new LiveCounter has nothing live and a peak of zero."""
    counter = LiveCounter()

    assert counter.live == 0
    assert counter.peak == 0


def test_live_counter_tracks_live_and_peak_over_several_loaders() -> None:
    """live counts loaded instances sharing the counter; peak the most live at once."""
    counter = LiveCounter()
    first, second, third = (FakeLoader(live_counter=counter) for _ in range(3))

    first.load()
    second.load()
    assert (counter.live, counter.peak) == (2, 2)

    first.unload()
    assert (counter.live, counter.peak) == (1, 2)

    third.load()
    assert (counter.live, counter.peak) == (2, 2)

    second.unload()
    third.unload()
    assert (counter.live, counter.peak) == (0, 2)


def test_live_counter_ignores_failed_loads_and_unloads_of_unloaded() -> None:
    """A failed load adds nothing live; unloading a loader that is not loaded removes nothing."""
    counter = LiveCounter()
    failing = FakeLoader(load_error=UnavailableError("no"), live_counter=counter)
    loaded = FakeLoader(live_counter=counter)
    loaded.load()

    with pytest.raises(UnavailableError):
        failing.load()
    failing.unload()

    assert (counter.live, counter.peak) == (1, 1)


def run_all_at_once(loaders: list[FakeLoader], action: str) -> None:
    """Calls ``action`` ("load" or "unload") of every loader, each on its own thread, together."""
    barrier = threading.Barrier(len(loaders))

    def run(loader: FakeLoader) -> None:
        barrier.wait(TIMEOUT_S)
        getattr(loader, action)()

    threads = [threading.Thread(target=run, args=(loader,), daemon=True) for loader in loaders]
    for thread in threads:
        thread.start()
    for thread in threads:
        join(thread)


def test_live_counter_is_exact_under_concurrent_loads_and_unloads() -> None:
    """Loads and unloads racing on many threads leave exact live and peak counts."""
    counter = LiveCounter()
    loaders = [FakeLoader(live_counter=counter) for _ in range(8)]

    run_all_at_once(loaders, "load")
    assert (counter.live, counter.peak) == (8, 8)

    run_all_at_once(loaders, "unload")
    assert (counter.live, counter.peak) == (0, 8)
