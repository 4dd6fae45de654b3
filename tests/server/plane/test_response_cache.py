"""ResponseCache and its config: the byte bound, LRU order, generations, Triton's flag syntax."""

from __future__ import annotations

import numpy as np
import pytest

from servinglib.errors import InvalidArgumentError
from servinglib.server.plane.response_cache import ENTRY_OVERHEAD_BYTES, ResponseCache
from servinglib.server.plane.response_cache_config import ResponseCacheConfig


def answer(size: int) -> dict[str, np.ndarray]:
    return {"y": np.zeros(size, np.uint8)}


def charged(size: int) -> int:
    """What an entry of one uint8 output of ``size`` items is charged."""
    cache = ResponseCache(1 << 20)
    cache.insert("m", b"k", answer(size), 0)
    return cache.usage().used_bytes


def test_eviction_follows_the_byte_bound_in_lru_order() -> None:
    """Past the bound the least recently used entry goes first; a lookup makes one recent."""
    one = charged(1000)
    cache = ResponseCache(3 * one)
    for key in (b"a", b"b", b"c"):
        assert cache.insert("m", key, answer(1000), 0)
    assert cache.lookup("m", b"a")[0] is not None  # a is now the most recent: b is the oldest
    assert cache.insert("m", b"d", answer(1000), 0)
    assert cache.lookup("m", b"b")[0] is None
    assert all(cache.lookup("m", k)[0] is not None for k in (b"a", b"c", b"d"))
    usage = cache.usage()
    assert (usage.entries, usage.used_bytes, usage.evictions) == (3, 3 * one, 1)


def test_an_answer_bigger_than_the_cache_is_not_stored() -> None:
    """An answer over the whole size is refused and evicts nothing."""
    cache = ResponseCache(4096)
    assert cache.insert("m", b"small", answer(10), 0)
    assert not cache.insert("m", b"huge", answer(4096), 0)
    assert cache.usage().entries == 1
    assert cache.usage().evictions == 0


def test_ten_thousand_distinct_answers_stay_within_the_bound() -> None:
    """No sequence of insertions grows the cache past its size."""
    cache = ResponseCache(64 << 10)
    for index in range(10_000):
        cache.insert("m", index.to_bytes(4, "little"), answer(index % 700), 0)
        assert cache.usage().used_bytes <= 64 << 10
    assert cache.usage().evictions > 0


def test_strings_are_charged_their_bytes() -> None:
    """A string tensor is charged its items' lengths, so a megabyte string fills the bound."""
    cache = ResponseCache(1 << 20)
    big = np.array([b"x" * (1 << 20)], dtype=object)
    assert not cache.insert("m", b"k", {"s": big}, 0)
    assert cache.insert("m", b"k", {"s": np.array([b"abc"], dtype=object)}, 0)
    assert cache.usage().used_bytes > ENTRY_OVERHEAD_BYTES


def test_stored_answers_are_read_only_copies() -> None:
    """Changing the model's array after insertion does not change the cached answer."""
    cache = ResponseCache(1 << 20)
    outputs = {"y": np.arange(4, dtype=np.float32)}
    cache.insert("m", b"k", outputs, 0)
    outputs["y"][0] = 99
    cached, _ = cache.lookup("m", b"k")
    assert cached is not None
    assert cached["y"].tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="read-only"):
        cached["y"][0] = 5


def test_forget_drops_the_model_and_refuses_older_insertions() -> None:
    """After forget, the model's entries are gone and an insertion of the old generation is
    refused (a call of a swapped-out version); other models keep theirs."""
    cache = ResponseCache(1 << 20)
    _, token = cache.lookup("m", b"k")
    cache.insert("other", b"o", answer(1), 0)
    cache.insert("m", b"old", answer(1), token)
    cache.forget("m")
    assert cache.lookup("m", b"old")[0] is None
    assert not cache.insert("m", b"k", answer(1), token)
    assert cache.lookup("other", b"o")[0] is not None
    _, fresh = cache.lookup("m", b"k")
    assert cache.insert("m", b"k", answer(1), fresh)


def test_hits_and_misses_are_counted_by_model() -> None:
    """Lookups count a hit or a miss for their model."""
    cache = ResponseCache(1 << 20)
    cache.lookup("m", b"k")
    cache.insert("m", b"k", answer(1), 0)
    cache.lookup("m", b"k")
    cache.lookup("n", b"z")
    usage = cache.usage()
    assert usage.hits == {"m": 1}
    assert usage.misses == {"m": 1, "n": 1}


def test_the_config_reads_tritons_syntax() -> None:
    """``local,size=BYTES`` is Triton's local cache of that many bytes."""
    assert ResponseCacheConfig.parse("local,size=1048576").size_bytes == 1048576


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("redis,host=x", "'local' cache only"),
        ("local", "sets no size"),
        ("local,size=0", "above 0"),
        ("local,size=lots", "above 0"),
        ("local,colour=red", "size=BYTES only"),
    ],
)
def test_the_config_refuses_what_it_cannot_do(text: str, fragment: str) -> None:
    """Other caches, other keys, and sizes that are not a positive number are refused."""
    with pytest.raises(InvalidArgumentError, match=fragment):
        ResponseCacheConfig.parse(text)
