"""MemoryTrimmer: freed heap goes back to the OS once RSS grows; trims that free little back off."""

from __future__ import annotations

import numpy as np
import pytest

from servinglib.server.cli.memory_trimmer import (
    MALLOC_ENVIRONMENT,
    MemoryTrimmer,
    allocate_runtimes_through_malloc,
)
from servinglib.testing import FakeClock

MIB = 1 << 20


def fragmented_heap(megabytes: int) -> list[bytes]:
    """Frees ``megabytes`` of malloc'd blocks but every 100th, which pins the rest in the heap."""
    blocks = [bytes(3000) for _ in range(megabytes * MIB // 3000)]
    return blocks[::100]


@pytest.fixture
def trimmer() -> MemoryTrimmer:
    made = MemoryTrimmer(growth_bytes=32 * MIB, clock=FakeClock())
    if not made.available:
        pytest.skip("no glibc malloc_trim here")
    return made


def test_a_grown_heap_is_given_back(trimmer: MemoryTrimmer) -> None:
    """After 200 MiB freed but pinned by fragments, a trim gives most of it back to the OS."""
    pins = fragmented_heap(200)
    released = trimmer.trim_if_grown()
    assert released is not None
    assert released > 100 * MIB
    assert trimmer.trim_if_grown() is None  # back near the floor: nothing to do
    del pins


def test_trims_that_free_little_back_off_until_the_clock_moves() -> None:
    """Memory in use keeps the RSS up: after a trim that frees little, checks wait (1 s, 2 s)."""
    clock = FakeClock()
    trimmer = MemoryTrimmer(growth_bytes=32 * MIB, clock=clock)
    if not trimmer.available:
        pytest.skip("no glibc malloc_trim here")
    live = np.ones(100 * MIB // 8)  # touched: resident, and not trimmable
    released = trimmer.trim_if_grown()
    assert released is not None
    assert released < 8 * MIB
    assert trimmer.trim_if_grown() is None  # waiting 1 s
    clock.advance(1.0)
    assert trimmer.trim_if_grown() is not None
    clock.advance(1.0)
    assert trimmer.trim_if_grown() is None  # waiting 2 s now
    clock.advance(1.0)
    assert trimmer.trim_if_grown() is not None
    del live


def test_runtimes_are_pointed_at_malloc_unless_the_user_chose() -> None:
    """TF's oneDNN pool is turned off in the environment, but a value the user set is kept."""
    environ: dict[str, str] = {}
    allocate_runtimes_through_malloc(environ)
    assert environ == {"TF_ONEDNN_USE_SYSTEM_ALLOCATOR": "1"} == MALLOC_ENVIRONMENT
    chosen = {"TF_ONEDNN_USE_SYSTEM_ALLOCATOR": "0"}
    allocate_runtimes_through_malloc(chosen)
    assert chosen == {"TF_ONEDNN_USE_SYSTEM_ALLOCATOR": "0"}
