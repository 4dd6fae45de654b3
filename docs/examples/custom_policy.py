"""A custom AspiredVersionPolicy: availability-preserving, but one load per servable at a time.

Run: .venv/bin/python docs/examples/custom_policy.py
"""

from __future__ import annotations

from collections.abc import Sequence

from servinglib import (
    AspiredVersionPolicy,
    AspiredVersionsManager,
    AvailabilityPreservingPolicy,
    HarnessState,
    Loader,
    ServableData,
    ServableId,
    SimpleLoader,
)
from servinglib.core import Action, AspiredServableStateSnapshot, ServableAction

_LOADING = frozenset(
    {HarnessState.LOAD_REQUESTED, HarnessState.LOAD_APPROVED, HarnessState.LOADING}
)


class OneLoadAtATimePolicy(AspiredVersionPolicy):
    """AvailabilityPreservingPolicy's choices, minus any load while another version loads.

    With several load threads the built-in policies may load several versions of one name
    at once; this one bounds the memory a burst of new versions takes while loading.
    Stateless, so thread-safe.
    """

    _availability = AvailabilityPreservingPolicy()

    def next_action(
        self, versions: Sequence[AspiredServableStateSnapshot]
    ) -> ServableAction | None:
        action = self._availability.next_action(versions)
        if action is None or action.action is Action.UNLOAD:
            return action
        if any(v.state in _LOADING for v in versions):
            return None
        return action


def snapshot(version: int, state: HarnessState) -> AspiredServableStateSnapshot:
    return AspiredServableStateSnapshot(ServableId("m", version), state, is_aspired=True)


def main() -> None:
    # A policy is a pure function of a snapshot, so it can be checked with plain calls.
    busy = [snapshot(1, HarnessState.LOADING), snapshot(2, HarnessState.NEW)]
    print("built-in:", AvailabilityPreservingPolicy().next_action(busy))
    print("custom:  ", OneLoadAtATimePolicy().next_action(busy))

    # Plug it into a manager.  Stepping by hand (no manage-state thread, 0 load threads):
    # each run_once() takes at most one action and runs the load before it returns.
    with AspiredVersionsManager(OneLoadAtATimePolicy(), manage_state_interval_s=None) as manager:
        loaded: list[int] = []

        def item(number: int) -> ServableData[Loader]:
            def create() -> str:
                loaded.append(number)
                return f"m v{number}"

            return ServableData.of(ServableId("m", number), SimpleLoader(create))

        manager.set_aspired_versions("m", [item(1), item(2), item(3)])
        steps = 0
        while manager.run_once():
            steps += 1
        print(f"loaded in order {loaded} in {steps} steps")
        print("available:", [str(i) for i in manager.list_available_servable_ids()])


if __name__ == "__main__":
    main()
