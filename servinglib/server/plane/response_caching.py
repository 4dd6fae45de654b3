"""ResponseCaching: which calls the response cache answers, as a wrapper of their placement."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, final

import numpy.typing as npt

from servinglib.core.servable_state import ServableState
from servinglib.request_extras import request_extras
from servinglib.servable import ModelCall, Placement, deadline_exceeded
from servinglib.server.plane.response_cache import CacheUsage, Outputs, ResponseCache
from servinglib.server.plane.response_cache_config import ResponseCacheConfig
from servinglib.server.plane.response_cache_key import response_cache_key
from servinglib.server.server_core import ServerCore

_log = logging.getLogger("servinglib.server")


@final
class ResponseCaching:
    """Puts the response cache in front of the placement of each call that may use it.

    A call may when its signature asks (``SignatureSpec.response_cache``) or
    its model's ``config.pbtxt`` sets ``response_cache { enable: true }``,
    and the signature does not stream (decoupled models are never cached),
    nor is the model a sequence model (Triton caches none).  Such a call's
    placement is wrapped (:meth:`around`): a hit answers at once, releasing
    the call without running it (no batch queue, no worker); a miss runs the
    call where it was placed and caches its answer.  Any state change of a
    model's versions forgets its answers, so a swapped version's are never
    served.  With no cache configured, a model asking for one is warned of
    once and served uncached.
    Thread-safe: the models' decisions are a dict replaced whole.
    """

    def __init__(self, core: ServerCore, config: ResponseCacheConfig | None) -> None:
        self._core = core
        self._cache = None if config is None else ResponseCache(config.size_bytes)
        self._asks: dict[str, bool] = {}  # model → config asks for the cache; replaced whole
        self._warned_lock = threading.Lock()
        self._warned: set[str] = set()  # guarded by: _warned_lock
        self._subscription = core.event_bus.subscribe(self._on_state)

    @property
    def cache(self) -> ResponseCache | None:
        """The cache (None: none configured)."""
        return self._cache

    def usage(self) -> CacheUsage | None:
        """What the cache holds and has counted (None: no cache)."""
        return None if self._cache is None else self._cache.usage()

    def around(self, call: ModelCall, placement: Placement) -> Placement:
        """``placement``, or the cache in front of it when ``call`` may be answered from it."""
        spec = call.spec
        if spec.streaming:
            return placement
        name = call.site.model_name
        asks = self._asks.get(name)
        if asks is None:
            asks = self._model_asks(name)
        if not (asks or spec.response_cache):
            return placement
        if self._cache is None:
            self._warn_no_cache(name)
            return placement
        return _CachedPlacement(self._cache, placement)

    def _model_asks(self, name: str) -> bool:
        model = self._core.config.model(name)
        triton = None if model is None else model.triton_config
        asks = False
        if triton is not None:
            message = triton.message
            asks = message.response_cache.enable and not message.HasField("sequence_batching")
        self._asks = {**self._asks, name: asks}
        return asks

    def _warn_no_cache(self, name: str) -> None:
        with self._warned_lock:
            if name in self._warned:
                return
            self._warned.add(name)
        _log.warning(
            "Model %s asks for the response cache, but the server has none "
            "(--cache_config=local,size=BYTES): its answers are not cached",
            name,
            extra={"model": name},
        )

    def _on_state(self, state: ServableState) -> None:
        name = state.id.name
        self._asks = {k: v for k, v in self._asks.items() if k != name}
        if self._cache is not None:
            self._cache.forget(name)

    def close(self) -> None:
        """Stops following the core's version states."""
        self._subscription.cancel()


@final
class _CachedPlacement(Placement):
    """The cache in front of one call's placement: a hit answers without running the call.

    Thread-safe: made for one call.
    """

    __slots__ = ("_cache", "_inner")

    def __init__(self, cache: ResponseCache, inner: Placement) -> None:
        self._cache = cache
        self._inner = inner

    async def run(self, call: ModelCall) -> dict[str, npt.NDArray[Any]]:
        started = time.perf_counter_ns()
        key = _key(call)
        if key is None:
            return await self._inner.run(call)
        cached, token = self._cache.lookup(call.site.model_name, key)
        if cached is not None:
            return _answer(call, cached, started)
        looked_up_ns = time.perf_counter_ns() - started
        outputs = await self._inner.run(call)
        self._insert(call, key, outputs, token, looked_up_ns)
        return outputs

    def run_blocking(self, call: ModelCall) -> dict[str, npt.NDArray[Any]]:
        started = time.perf_counter_ns()
        key = _key(call)
        if key is None:
            return self._inner.run_blocking(call)
        cached, token = self._cache.lookup(call.site.model_name, key)
        if cached is not None:
            return _answer(call, cached, started)
        looked_up_ns = time.perf_counter_ns() - started
        outputs = self._inner.run_blocking(call)
        self._insert(call, key, outputs, token, looked_up_ns)
        return outputs

    def _insert(
        self,
        call: ModelCall,
        key: bytes,
        outputs: dict[str, npt.NDArray[Any]],
        token: int,
        looked_up_ns: int,
    ) -> None:
        started = time.perf_counter_ns()
        self._cache.insert(call.site.model_name, key, outputs, token)
        call.stages.cache_hit = False
        call.stages.cache_ns = looked_up_ns + time.perf_counter_ns() - started


def _key(call: ModelCall) -> bytes | None:
    return response_cache_key(
        call.site, call.inputs, call.output_filter, request_extras().parameters
    )


def _answer(call: ModelCall, cached: Outputs, started: int) -> dict[str, npt.NDArray[Any]]:
    """A hit: the call is released without running; past its deadline it still fails."""
    call.release()
    deadline = call.deadline
    if deadline is not None and time.monotonic() > deadline:
        raise deadline_exceeded()
    call.stages.cache_hit = True
    call.stages.cache_ns = time.perf_counter_ns() - started
    return dict(cached)
