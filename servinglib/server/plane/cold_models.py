"""A request for a model loaded on demand that is not loaded waits for its load.

:class:`ColdModels` asks the core's :class:`~servinglib.core.on_demand_loads.OnDemandLoads`
to load a model a request names (it answers None for a model that is loaded, or not loaded on
demand) and waits for the load within the request's deadline, on an event loop or a thread;
a load the deadline cuts short goes on, and the next request finds the model loaded.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Awaitable
from typing import Protocol, final

from servinglib.errors import DeadlineExceededError, UnavailableError
from servinglib.servable import within_deadline


class _Demand(Protocol):
    def demand(self, name: str) -> concurrent.futures.Future[None] | None: ...


class _Held(Protocol):
    def enter(self, name: str) -> None: ...

    def leave(self, name: str) -> None: ...


@final
class ColdModels:
    """Waits for the loads on demand of the models requests name.  Thread-safe.

    ``held``: the requests in flight, entered around a wait that does not count already (a
    model is never unloaded to make room while a request waits for it).
    """

    def __init__(self, on_demand: _Demand, held: _Held) -> None:
        self._on_demand = on_demand
        self._held = held

    def waiting(
        self, name: str, deadline: float | None, *, counted: bool = True
    ) -> Awaitable[None] | None:
        """What to await until ``name`` is loaded: None when it is (or does not load on
        demand), so the common case creates no coroutine; ``counted``: the request is in
        flight already.  The awaitable raises the load's error, or DeadlineExceededError
        (the load goes on)."""
        if (loading := self._on_demand.demand(name)) is None:
            return None
        return self._wait(name, loading, deadline, counted)

    async def _wait(
        self,
        name: str,
        loading: concurrent.futures.Future[None],
        deadline: float | None,
        counted: bool,
    ) -> None:
        if not counted:
            self._held.enter(name)
        try:
            await within_deadline(asyncio.wrap_future(loading), deadline)
        except DeadlineExceededError:
            raise _still_loading(name) from None
        finally:
            if not counted:
                self._held.leave(name)

    def wait_blocking(self, name: str, deadline: float | None, *, counted: bool = True) -> None:
        """:meth:`waiting` for a thread with no event loop: blocks instead."""
        if (loading := self._on_demand.demand(name)) is None:
            return
        if not counted:
            self._held.enter(name)
        try:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            loading.result(timeout)
        except concurrent.futures.TimeoutError:
            loading.cancel()
            raise _still_loading(name) from None
        finally:
            if not counted:
                self._held.leave(name)

    def refuse_while_loading(self, name: str) -> None:
        """For a caller that cannot wait: starts ``name``'s load and raises UnavailableError
        while it is not loaded (the load's error if it failed at once)."""
        if (loading := self._on_demand.demand(name)) is None:
            return
        if loading.done():
            loading.result()
        loading.cancel()
        raise UnavailableError(f"Model {name} is loading on demand: retry once it is loaded")


def _still_loading(name: str) -> DeadlineExceededError:
    return DeadlineExceededError(
        f"Deadline exceeded while model {name} loads on demand (its load goes on: a later "
        "request finds it loaded)"
    )
