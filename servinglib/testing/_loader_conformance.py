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

    In order: estimate_resources() before load; servable() must raise before
    load; load(), whose growth of the process's resident memory must stay
    within the RAM estimate (+ ``ram_slack_bytes``); the estimate must never
    increase afterwards; servable(); its calls from ``concurrent_calls``
    threads at once (``calls_per_thread`` each) must give the results of
    calls made alone; each signature called with one output as its
    ``output_filter`` must return exactly that output; unload() must not
    raise, must let the servable be garbage-collected, and servable() must
    raise again; then ``cycles`` - 1 more load → unload cycles on the same
    loader, whose memory growth must stay within ``max_memory_growth_bytes``
    (default: 64 MiB + the RAM estimate), and which must leave at most
    ``max_thread_growth`` more threads running (after 2 s to end) and
    ``max_fd_growth`` more file descriptors open.  With ``failing_factory``
    (a loader whose load() fails now, e.g. pointed at a missing or corrupt
    model), failed loads must leave no servable, memory, threads or file
    descriptors behind, and with ``heal_failure(loader)`` (removes the
    cause) the same loader's next load() must succeed.

    The servable is called through ``call(servable)`` if given (results
    compared with ``==``); otherwise, if it is a servinglib
    :class:`~servinglib.servable.Servable`, through each of its signatures,
    with ``inputs[signature]`` or zeros built from its TensorSpecs; any
    other servable is not called.
    Memory and file-descriptor checks need /proc (Linux) and are skipped
    elsewhere, where threads are counted from Python alone; the
    collection check is skipped for servables that take no weak reference
    (dict, list, ...).  ``skip`` names checks not to report (check ids, listed in
    docs/guides/testing_loaders.md).  Each check reports at most one violation.
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
