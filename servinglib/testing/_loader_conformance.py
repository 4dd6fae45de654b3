"""check_loader: drives a Loader through its contract and reports each broken promise."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from typing import Any

from servinglib.servable import Tensors
from servinglib.testing._loader_run import L, LoaderRun, RunSettings
from servinglib.testing._memory import collections_of_new_objects_only
from servinglib.testing._violation import Violation, asserting, check_skip

LOADER_CHECKS = (
    "estimate-raises",
    "estimate-increases",
    "estimate-too-low",
    "servable-before-load",
    "load-fails",
    "servable-after-load",
    "concurrent-calls",
    "output-filter",
    "unload-raises",
    "unload-releases",
    "servable-after-unload",
    "reload",
    "memory-growth",
    "thread-growth",
    "fd-growth",
    "failed-load-clean",
)
"""The ids of check_loader's checks, in the order it runs them."""

DEFAULT_RAM_SLACK_BYTES = 16 * 2**20
DEFAULT_THREAD_GROWTH = 2
DEFAULT_FD_GROWTH = 4


def check_loader(
    factory: Callable[[], L],
    *,
    cycles: int = 20,
    concurrent_calls: int = 8,
    calls_per_thread: int = 4,
    inputs: Mapping[str, Tensors] | None = None,
    call: Callable[[Any], object] | None = None,
    failing_factory: Callable[[], L] | None = None,
    heal_failure: Callable[[L], None] | None = None,
    ram_slack_bytes: int = DEFAULT_RAM_SLACK_BYTES,
    max_memory_growth_bytes: int | None = None,
    max_thread_growth: int = DEFAULT_THREAD_GROWTH,
    max_fd_growth: int = DEFAULT_FD_GROWTH,
    timeout_s: float = 30.0,
    skip: Collection[str] = (),
) -> list[Violation]:
    """Drives a loader from ``factory()`` through the Loader contract; returns what it breaks.

    The checks, in order, and what each parameter bounds are listed in
    docs/guides/testing_loaders.md ("Check the Loader contract"); ``skip``
    names check ids not to report.  Each check reports at most one
    violation.  Memory and file-descriptor checks need /proc (Linux).
    Requires: ``factory`` returns a new, unloaded loader.
    Thread safety: runs on the calling thread (and its own threads for the
    concurrent calls); the loader is never loaded or unloaded concurrently.
    """
    if cycles < 1 or concurrent_calls < 1 or calls_per_thread < 1:
        raise ValueError("cycles, concurrent_calls and calls_per_thread must be >= 1")
    run = LoaderRun(
        RunSettings(
            cycles=cycles,
            concurrent_calls=concurrent_calls,
            calls_per_thread=calls_per_thread,
            inputs=inputs if inputs is not None else {},
            call=call,
            ram_slack_bytes=ram_slack_bytes,
            max_memory_growth_bytes=max_memory_growth_bytes,
            max_thread_growth=max_thread_growth,
            max_fd_growth=max_fd_growth,
            timeout_s=timeout_s,
            skip=check_skip(skip, LOADER_CHECKS),
        )
    )
    with collections_of_new_objects_only():
        run.check(factory)
        if failing_factory is not None:
            run.check_failures(failing_factory, heal_failure)
    return run.violations


assert_loader_conforms = asserting(check_loader, "The loader", "assert_loader_conforms")
