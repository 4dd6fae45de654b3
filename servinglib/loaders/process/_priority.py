"""Thread priorities of a model process: loading and unloading run at idle priority."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

_log = logging.getLogger(__name__)

T = TypeVar("T")


def lower_this_thread() -> None:
    """Puts the calling thread in ``SCHED_IDLE`` (where the platform has it)."""
    policy = getattr(os, "SCHED_IDLE", None)
    if policy is None:
        return
    try:
        os.sched_setscheduler(0, policy, os.sched_param(0))
    except OSError as error:  # a seccomp profile may refuse it: run at normal priority
        _log.warning("Cannot lower the priority of a model process's load: %s", error)


def run_idle(work: Callable[[], T]) -> T:
    """``work()`` on a new thread at idle priority: what it returns, or raises."""
    with ThreadPoolExecutor(1, "servinglib-idle", initializer=lower_this_thread) as pool:
        return pool.submit(work).result()
