"""When a sequence model's free instance runs a batch, and of how many sequences."""

from __future__ import annotations

from servinglib.loaders.triton.sequence_batch_policy import batch_size_now, size_at_once
from servinglib.loaders.triton.sequence_options import SequenceOptions, Strategy

DIRECT = SequenceOptions(Strategy.DIRECT, slots=4, max_batch_size=4, max_queue_delay_s=1.0)
OLDEST = SequenceOptions(
    Strategy.OLDEST, slots=8, max_batch_size=4, max_queue_delay_s=1.0, preferred_batch_sizes=[2]
)


def test_nothing_ready_waits_for_a_change() -> None:
    """No ready sequence: no batch, no time to wake at."""
    assert batch_size_now([], DIRECT, 5.0) == (0, None)


def test_direct_runs_as_soon_as_one_slot_is_ready_by_default() -> None:
    """Direct with minimum_slot_utilization 0 runs one ready slot at once, delay or not."""
    assert batch_size_now([5.0], DIRECT, 5.0) == (1, None)


def test_direct_waits_for_its_minimum_slot_utilization_until_the_delay() -> None:
    """Utilization 0.5 of 4 slots: one ready waits until its delay, two run at once."""
    options = SequenceOptions(
        Strategy.DIRECT, slots=4, max_batch_size=4, max_queue_delay_s=1.0,
        minimum_slot_utilization=0.5,
    )  # fmt: skip

    assert batch_size_now([5.0], options, 5.5) == (0, 6.0)
    assert batch_size_now([5.0], options, 6.0) == (1, None)
    assert batch_size_now([5.0, 5.2], options, 5.5) == (2, None)


def test_oldest_runs_a_preferred_size_or_a_full_batch_at_once_else_at_the_delay() -> None:
    """Oldest: one ready waits for the delay; two (preferred) or four (full) run at once,
    never more than max_batch_size of eight ready; three take the preferred two."""
    assert batch_size_now([5.0], OLDEST, 5.1) == (0, 6.0)
    assert batch_size_now([5.0], OLDEST, 6.5) == (1, None)
    assert batch_size_now([5.0, 5.1], OLDEST, 5.1) == (2, None)
    assert batch_size_now([5.0, 5.1, 5.2], OLDEST, 5.2) == (2, None)
    assert batch_size_now([5.0 + i / 10 for i in range(8)], OLDEST, 5.8) == (4, None)


def test_the_size_run_at_once_never_shrinks_as_sequences_become_ready() -> None:
    """What a batcher decides wakes on: the batch run at once, whatever the ages, only grows
    with the ready count (so one that sees none need not look until one more is ready), and
    is what batch_size_now runs before any delay."""
    utilized = SequenceOptions(
        Strategy.DIRECT, slots=4, max_batch_size=4, max_queue_delay_s=1.0,
        minimum_slot_utilization=0.5,
    )  # fmt: skip
    for options in (DIRECT, OLDEST, utilized):
        sizes = [size_at_once(ready, options) for ready in range(10)]
        assert sizes == sorted(sizes)
        for ready in range(1, 10):
            arrivals = [5.0 + i / 100 for i in range(ready)]
            assert batch_size_now(arrivals, options, 5.0)[0] == sizes[ready]

    assert [size_at_once(n, OLDEST) for n in range(6)] == [0, 0, 2, 2, 4, 4]
    assert [size_at_once(n, utilized) for n in range(6)] == [0, 0, 2, 3, 4, 4]
