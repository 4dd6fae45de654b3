"""When a sequence model's instance runs a batch, and of how many sequences' requests.

A pure function of a snapshot (:func:`batch_size_now`): the arrival times of the first
queued request of each ready sequence of one free instance (a sequence is ready when it
holds a slot of the instance, runs nothing and has a request queued), the options, and
the time.  The batcher takes the oldest ones.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from servinglib.loaders.triton.sequence_options import SequenceOptions, Strategy


def batch_size_now(
    head_arrivals: Sequence[float], options: SequenceOptions, now: float
) -> tuple[int, float | None]:
    """``(n, None)``: run the ``n`` oldest ready sequences' first requests now (n > 0);
    ``(0, t)``: wait until ``t`` (None: until something changes).

    Requires: ``head_arrivals`` sorted, oldest first.

    Both strategies run at once a batch of ``max_batch_size`` requests; ``oldest`` runs at
    once the largest preferred size that is ready; ``direct`` runs at once when the ready
    slots are at least ``minimum_slot_utilization`` of its slots (0, the default: one);
    otherwise a batch runs when its oldest request has waited ``max_queue_delay_s``.
    """
    ready = len(head_arrivals)
    if not ready:
        return 0, None
    size = size_at_once(ready, options)
    if size:
        return size, None
    due = head_arrivals[0] + options.max_queue_delay_s
    if now >= due:
        return min(ready, options.max_batch_size), None
    return 0, due


def size_at_once(ready: int, options: SequenceOptions) -> int:
    """The batch ``ready`` sequences make at once, whatever their requests' ages (0: none
    before the oldest has waited the queue delay).  Grows with ``ready``: a batcher that
    sees none need not look again until another sequence becomes ready."""
    largest = min(ready, options.max_batch_size)
    if ready >= options.max_batch_size:
        return largest
    if options.strategy is Strategy.OLDEST:
        return max((size for size in options.preferred_batch_sizes if size <= ready), default=0)
    wanted = math.ceil(options.minimum_slot_utilization * options.slots)
    return largest if ready >= max(1, wanted) else 0
