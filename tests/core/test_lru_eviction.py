"""choose_evictions: the least recently used evictable models, just enough to make room."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from servinglib.core.lru_eviction import ResidentModel, choose_evictions


def test_nothing_is_evicted_when_the_load_fits() -> None:
    """Room enough: no eviction."""
    assert choose_evictions([ResidentModel("a", 40, 1, True)], 60, 100) == []


def test_the_least_recently_used_go_first_and_only_as_many_as_needed() -> None:
    """Evicts in order of last use, stopping once the load fits."""
    resident = [
        ResidentModel("new", 30, 9, True),
        ResidentModel("old", 30, 1, True),
        ResidentModel("mid", 30, 5, True),
    ]
    assert choose_evictions(resident, 40, 100) == ["old"]
    assert choose_evictions(resident, 70, 100) == ["old", "mid"]


def test_busy_and_pinned_models_are_skipped_and_no_room_is_none() -> None:
    """Models not evictable stay, even when older; a load that cannot fit evicts none."""
    resident = [ResidentModel("busy", 50, 1, False), ResidentModel("idle", 30, 5, True)]
    assert choose_evictions(resident, 40, 100) == ["idle"]
    assert choose_evictions(resident, 60, 100) is None


@given(
    st.lists(st.tuples(st.integers(0, 100), st.booleans()), max_size=8),
    st.integers(0, 300),
    st.integers(0, 400),
)
def test_the_choice_makes_room_with_evictable_models_only(
    models: list[tuple[int, bool]], needed: int, budget: int
) -> None:
    """Whatever it chooses is evictable and frees enough; None only when all would not do."""
    resident = [ResidentModel(f"m{i}", size, i, ok) for i, (size, ok) in enumerate(models)]
    chosen = choose_evictions(resident, needed, budget)
    used = sum(size for size, _ in models)
    evictable = sum(size for size, ok in models if ok)
    if chosen is None:
        assert used - evictable + needed > budget
    else:
        by_name = {m.name: m for m in resident}
        assert all(by_name[name].evictable for name in chosen)
        assert used - sum(by_name[name].ram_bytes for name in chosen) + needed <= budget
