"""OnDemandLoads: which aspired versions pass to the manager, when, and what waiting requests
get."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from servinglib.core.event_bus import EventBus
from servinglib.core.loader import Loader
from servinglib.core.on_demand_loads import OnDemandLoads
from servinglib.core.resources import ResourceAllocation
from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId
from servinglib.core.servable_state import ManagerState, ServableState
from servinglib.errors import NotFoundError, ResourceExhaustedError, UnknownError
from servinglib.testing import FakeLoader


class Recorder:
    """The manager's side: each aspired-versions call the gate passes on, in order."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[int, ...]]] = []
        self.revisions: list[tuple[int, ...]] = []

    def __call__(self, name: str, versions: Sequence[ServableData[Loader]]) -> None:
        self.calls.append((name, tuple(v.id.version for v in versions)))
        self.revisions.append(tuple(v.revision for v in versions))


def version(name: str, ram_bytes: int = 100) -> list[ServableData[Loader]]:
    """Version 1 of ``name`` with a loader estimating ``ram_bytes``."""
    loader = FakeLoader(resource_estimate=ResourceAllocation.ram_bytes(ram_bytes))
    return [ServableData.of(ServableId(name, 1), loader)]


def gate(
    budget_bytes: int | None = None, **on_demand: bool
) -> tuple[OnDemandLoads, Recorder, EventBus[ServableState]]:
    """A gate over a recorder, its models configured and given version 1 each."""
    recorder, states = Recorder(), EventBus[ServableState]()
    loads = OnDemandLoads(recorder, states, budget_bytes=budget_bytes)
    loads.configure(on_demand)
    for name in on_demand:
        loads.set_aspired_versions(name, version(name))
    return loads, recorder, states


def available(states: EventBus[ServableState], name: str) -> None:
    states.publish(ServableState(ServableId(name, 1), ManagerState.AVAILABLE))


def test_pinned_models_pass_at_once_and_on_demand_ones_only_when_asked() -> None:
    """A pinned model's versions reach the manager at once; an on-demand model's on demand."""
    loads, recorder, _ = gate(pinned=False, lazy=True)
    assert recorder.calls == [("pinned", (1,))]
    assert loads.demand("pinned") is None
    assert loads.demand("lazy") is not None
    assert recorder.calls[-1] == ("lazy", (1,))


def test_requests_share_one_load_and_all_complete_when_it_is_available() -> None:
    """Two demands while loading pass the versions on once; both complete on AVAILABLE."""
    loads, recorder, states = gate(m=True)
    first, second = loads.demand("m"), loads.demand("m")
    assert first is not None
    assert second is not None
    assert first is not second
    assert recorder.calls == [("m", (1,))]
    available(states, "m")
    assert first.result(0) is None
    assert second.result(0) is None
    assert loads.demand("m") is None  # loaded: no wait


def test_a_cancelled_wait_leaves_the_load_and_the_other_waits() -> None:
    """One request giving up (its deadline) does not cancel the load for another."""
    loads, _, states = gate(m=True)
    gave_up, waiting = loads.demand("m"), loads.demand("m")
    assert gave_up is not None
    assert waiting is not None
    gave_up.cancel()
    available(states, "m")
    assert waiting.result(0) is None


def test_a_failed_load_fails_every_wait_and_the_next_demand_loads_afresh() -> None:
    """END with an error: waits get it, the versions are withdrawn, and the next demand passes
    them again with a new revision (so the manager replaces the failed harness)."""
    loads, recorder, states = gate(m=True)
    waiting = loads.demand("m")
    assert waiting is not None
    error = UnknownError("boom")
    states.publish(ServableState(ServableId("m", 1), ManagerState.END, error))
    with pytest.raises(UnknownError):
        waiting.result(0)
    assert recorder.calls[-1] == ("m", ())
    assert loads.registered("m") == ((1,), error)
    assert loads.demand("m") is not None
    assert recorder.calls[-1] == ("m", (1,))
    assert recorder.revisions[0] != recorder.revisions[-1]


def test_room_is_made_by_the_least_recently_used_idle_model() -> None:
    """Budget for two: loading a third withdraws the one used longest ago, not a busy one."""
    loads, recorder, states = gate(250, a=True, b=True, c=True, d=True)
    busy = {"b"}
    loads.count_requests_with(lambda name: int(name in busy))
    for name in ["b", "a"]:  # b is now the least recently used, but busy
        loads.demand(name)
        available(states, name)
    loads.demand("c")
    assert recorder.calls[-2:] == [("a", ()), ("c", (1,))]
    assert loads.registered("a") == ((1,), None)
    busy.clear()
    available(states, "c")
    loads.demand("d")
    assert recorder.calls[-2:] == [("b", ()), ("d", (1,))]


def test_a_load_that_cannot_fit_fails_at_once_and_unloads_nothing() -> None:
    """Bigger than the budget: RESOURCE_EXHAUSTED naming both; nothing is withdrawn."""
    recorder, states = Recorder(), EventBus[ServableState]()
    loads = OnDemandLoads(recorder, states, budget_bytes=150)
    loads.configure({"small": True, "big": True})
    loads.set_aspired_versions("small", version("small"))
    loads.set_aspired_versions("big", version("big", 200))
    loads.demand("small")
    available(states, "small")
    waiting = loads.demand("big")
    assert waiting is not None
    with pytest.raises(ResourceExhaustedError, match=r"200 bytes.*budget of 150 bytes"):
        waiting.result(0)
    assert recorder.calls == [("small", (1,))]


def test_a_model_removed_from_the_config_fails_its_waits() -> None:
    """Requests waiting for a model the config drops get NOT_FOUND."""
    loads, _, _ = gate(m=True)
    waiting = loads.demand("m")
    assert waiting is not None
    loads.configure({})
    with pytest.raises(NotFoundError, match="removed"):
        waiting.result(0)


def test_names_not_configured_pass_through_and_need_no_wait() -> None:
    """A name the gate does not keep reaches the manager as sent; a demand of it is None."""
    recorder, states = Recorder(), EventBus[ServableState]()
    loads = OnDemandLoads(recorder, states)
    loads.set_aspired_versions("other", version("other"))
    assert recorder.calls == [("other", (1,))]
    assert loads.demand("other") is None


def test_a_model_withdrawn_and_asked_for_again_loads_once_its_unload_ended() -> None:
    """Asked for again before its withdrawal was unloaded, a model's versions are passed on only
    after its END: passed at once, they could replace the withdrawal before the manager saw it,
    and the model would never load again nor publish AVAILABLE (its waits hung)."""
    loads, recorder, states = gate(250, a=True, b=True, c=True)
    for name in ["a", "b"]:
        loads.demand(name)
        available(states, name)
    loads.demand("c")  # withdraws a
    available(states, "c")
    waiting = loads.demand("a")  # withdraws b; a's version is not unloaded yet
    assert waiting is not None
    assert recorder.calls[-1] == ("b", ())
    states.publish(ServableState(ServableId("a", 1), ManagerState.END))
    assert recorder.calls[-1] == ("a", (1,))
    available(states, "a")
    assert waiting.result(0) is None


def test_a_poll_re_sending_a_withdrawn_models_versions_does_not_pass_them_before_its_end() -> None:
    """The source's periodic re-send of a model waiting for its withdrawal's END is kept, not
    passed on: passed, it could replace the withdrawal before the manager saw it, and the model
    would wait for an END that never comes (its requests hung, each until its deadline)."""
    loads, recorder, states = gate(250, a=True, b=True, c=True)
    for name in ["a", "b"]:
        loads.demand(name)
        available(states, name)
    loads.demand("c")  # withdraws a
    available(states, "c")
    waiting = loads.demand("a")  # a's version is not unloaded yet: its load waits for END
    assert waiting is not None
    passed = len(recorder.calls)
    loads.set_aspired_versions("a", version("a"))  # a full poll emits a's unchanged set
    assert recorder.calls[passed:] == []
    states.publish(ServableState(ServableId("a", 1), ManagerState.END))
    assert recorder.calls[-1] == ("a", (1,))
    available(states, "a")
    assert waiting.result(0) is None
