"""check_loader: drives a Loader through its contract and reports each broken promise."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Collection, Mapping
from typing import Any, TypeVar

from servinglib.core.loader import Loader
from servinglib.core.resources import MAIN_DEVICE, RAM_IN_BYTES, ResourceAllocation
from servinglib.servable import Tensors
from servinglib.testing._concurrent_calls import concurrent_call_problems
from servinglib.testing._leaks import Holdings, fd_leak, thread_leak
from servinglib.testing._memory import format_bytes, resident_bytes
from servinglib.testing._output_filter import output_filter_problems
from servinglib.testing._referrers import describe_referrers
from servinglib.testing._violation import Violation, check_skip, error_text, violations_text

L = TypeVar("L", bound=Loader)

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
DEFAULT_MEMORY_GROWTH_BYTES = 64 * 2**20
DEFAULT_THREAD_GROWTH = 2
DEFAULT_FD_GROWTH = 4
_SETTLE_S = 2.0  # how long threads started by the cycles get to end by themselves


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
    run = _LoaderRun(
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
    run.check(factory)
    if failing_factory is not None:
        run.check_failures(failing_factory, heal_failure)
    return run.violations


def assert_loader_conforms(
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
) -> None:
    """:func:`check_loader`, raising AssertionError that lists every violation found."""
    violations = check_loader(
        factory,
        cycles=cycles,
        concurrent_calls=concurrent_calls,
        calls_per_thread=calls_per_thread,
        inputs=inputs,
        call=call,
        failing_factory=failing_factory,
        heal_failure=heal_failure,
        ram_slack_bytes=ram_slack_bytes,
        max_memory_growth_bytes=max_memory_growth_bytes,
        max_thread_growth=max_thread_growth,
        max_fd_growth=max_fd_growth,
        timeout_s=timeout_s,
        skip=skip,
    )
    if violations:
        raise AssertionError(violations_text("The loader", violations))


class _LoaderRun:
    """One check_loader run: the options, the violations found, the estimates seen.

    Not thread-safe: one run, on one thread.
    """

    def __init__(
        self,
        *,
        cycles: int,
        concurrent_calls: int,
        calls_per_thread: int,
        inputs: Mapping[str, Tensors],
        call: Callable[[Any], object] | None,
        ram_slack_bytes: int,
        max_memory_growth_bytes: int | None,
        max_thread_growth: int,
        max_fd_growth: int,
        timeout_s: float,
        skip: frozenset[str],
    ) -> None:
        self._cycles = cycles
        self._threads = concurrent_calls
        self._calls_per_thread = calls_per_thread
        self._inputs = inputs
        self._call = call
        self._ram_slack_bytes = ram_slack_bytes
        self._max_growth_bytes = max_memory_growth_bytes
        self._max_thread_growth = max_thread_growth
        self._max_fd_growth = max_fd_growth
        self._timeout_s = timeout_s
        self._skip = skip
        self.violations: list[Violation] = []
        self._estimate: ResourceAllocation | None = None  # the last one seen
        self._ram_estimate = 0

    def report(self, check: str, message: str) -> None:
        """Records a violation of ``check``, unless skipped or already reported."""
        if check in self._skip or any(v.check == check for v in self.violations):
            return
        self.violations.append(Violation(check, message))

    # -- the main scenario ----------------------------------------------------

    def check(self, factory: Callable[[], Loader]) -> None:
        loader = factory()
        self._note_estimate(loader, "before load()")
        self._ram_estimate = _ram_bytes(self._estimate)
        self._expect_no_servable(loader, "servable-before-load", "before load()")
        if not self._first_load(loader):
            return
        self._note_estimate(loader, "after load()")
        collectable = self._use_servable(loader)
        self._unload(loader)
        self._note_estimate(loader, "after unload()")
        self._expect_collected(collectable)
        self._expect_no_servable(loader, "servable-after-unload", "after unload()")
        self._more_cycles(loader)

    def _first_load(self, loader: Loader) -> bool:
        before = resident_bytes()
        try:
            loader.load()
        except Exception as exc:  # noqa: BLE001 - the loader's failure is what we report
            self.report(
                "load-fails",
                f"load() raised {error_text(exc)}; nothing else could be checked (does the "
                "factory give the loader what it needs, e.g. a model directory?)",
            )
            return False
        after = resident_bytes()
        if before is not None and after is not None:
            self._check_upper_bound(after - before)
        return True

    def _check_upper_bound(self, growth: int) -> None:
        if growth <= self._ram_estimate + self._ram_slack_bytes:
            return
        self.report(
            "estimate-too-low",
            f"load() grew the process's resident memory by {format_bytes(growth)}, more than "
            f"its RAM estimate of {format_bytes(self._ram_estimate)} (+ "
            f"{format_bytes(self._ram_slack_bytes)} slack): estimate_resources() must be an "
            "upper bound of what load() uses, or a ResourceTracker admits loads that do not "
            "fit (one-time costs such as importing a framework count too: import it before "
            "the check, or raise ram_slack_bytes)",
        )

    def _use_servable(self, loader: Loader) -> weakref.ref[Any] | None:
        """Calls the servable concurrently; a weak reference to it, if it takes one."""
        try:
            servable = loader.servable()
        except Exception as exc:  # noqa: BLE001 - the loader's failure is what we report
            self.report(
                "servable-after-load",
                f"servable() raised {error_text(exc)} after a successful load(); it must "
                "return the loaded servable until unload()",
            )
            return None
        if "concurrent-calls" not in self._skip:
            for problem in concurrent_call_problems(
                servable,
                threads=self._threads,
                calls_per_thread=self._calls_per_thread,
                inputs=self._inputs,
                call=self._call,
                timeout_s=self._timeout_s,
            ):
                self.report("concurrent-calls", problem)
        if "output-filter" not in self._skip:
            for problem in output_filter_problems(servable, self._inputs):
                self.report("output-filter", problem)
        try:
            return weakref.ref(servable)
        except TypeError:  # e.g. a dict: collection cannot be observed
            return None

    def _unload(self, loader: Loader) -> None:
        try:
            loader.unload()
        except Exception as exc:  # noqa: BLE001 - the loader's failure is what we report
            self.report(
                "unload-raises",
                f"unload() raised {error_text(exc)}; it should not raise: the manager logs "
                "and ignores the error, and whatever the unload did not release stays held",
            )

    def _expect_collected(self, collectable: weakref.ref[Any] | None) -> None:
        if collectable is None:
            return
        gc.collect()
        servable = collectable()
        if servable is None:
            return
        kind, holders = _type_name(servable), describe_referrers(servable)
        del servable
        self.report(
            "unload-releases",
            f"the servable ({kind}) is still alive after unload() and gc.collect(), "
            f"referenced from {holders}: unload() must drop every reference to it, or the "
            "model's memory is never freed",
        )

    def _more_cycles(self, loader: Loader) -> None:
        baseline = resident_bytes()
        held = Holdings.now()
        for cycle in range(2, self._cycles + 1):
            try:
                loader.load()
            except Exception as exc:  # noqa: BLE001 - the loader's failure is what we report
                self.report(
                    "reload",
                    f"load() after unload() raised {error_text(exc)} (cycle {cycle}): "
                    "load → unload → load must work",
                )
                return
            self._note_estimate(loader, f"after load() of cycle {cycle}")
            self._expect_servable(loader, cycle)
            self._unload(loader)
        end = resident_bytes()
        if baseline is not None and end is not None and self._cycles > 1:
            self._check_growth(
                "memory-growth",
                end - baseline,
                f"{self._cycles - 1} more load → unload cycles",
                "unload() must release everything load() acquired (caches, module state, files)",
            )
        if self._cycles > 1:
            self._check_held(
                ("thread-growth", "fd-growth"),
                held,
                f"{self._cycles - 1} more load → unload cycles",
                "unload() must stop the threads (join them) and close the files, sockets and "
                "pipes load() started and opened",
            )

    def _expect_servable(self, loader: Loader, cycle: int) -> None:
        try:
            loader.servable()
        except Exception as exc:  # noqa: BLE001 - the loader's failure is what we report
            self.report(
                "servable-after-load",
                f"servable() raised {error_text(exc)} after a successful load() (cycle "
                f"{cycle}); it must return the loaded servable until unload()",
            )

    # -- failed loads -------------------------------------------------------

    def check_failures(
        self, failing_factory: Callable[[], L], heal_failure: Callable[[L], None] | None
    ) -> None:
        loader = failing_factory()
        baseline = None
        held: Holdings | None = None
        for attempt in range(1, self._cycles + 1):
            try:
                loader.load()
            except Exception:  # noqa: BLE001 - failing is what this loader is for
                pass
            else:
                self.report(
                    "failed-load-clean",
                    "the loader from failing_factory loaded, so failed loads could not be "
                    "checked: failing_factory must return a loader whose load() fails",
                )
                self._unload(loader)
                return
            self._expect_no_servable(loader, "failed-load-clean", "after a failed load()")
            if attempt == 1:
                baseline = resident_bytes()
                held = Holdings.now()
        end = resident_bytes()
        if baseline is not None and end is not None and self._cycles > 1:
            self._check_growth(
                "failed-load-clean",
                end - baseline,
                f"{self._cycles - 1} more failed loads",
                "a failed load() must release what it acquired before raising",
            )
        if held is not None and self._cycles > 1:
            self._check_held(
                ("failed-load-clean", "failed-load-clean"),
                held,
                f"{self._cycles - 1} more failed loads",
                "a failed load() must stop the threads and close the files it opened before "
                "raising",
            )
        if heal_failure is not None:
            heal_failure(loader)
            self._load_healed(loader)

    def _load_healed(self, loader: Loader) -> None:
        try:
            loader.load()
        except Exception as exc:  # noqa: BLE001 - the loader's failure is what we report
            self.report(
                "failed-load-clean",
                f"after failed loads and heal_failure(), load() of the same loader raised "
                f"{error_text(exc)}: a failed load must leave nothing half-loaded, since the "
                "manager retries a failed load on the same loader",
            )
            return
        self._expect_servable(loader, 1)
        self._unload(loader)

    # -- helpers ------------------------------------------------------------

    def _note_estimate(self, loader: Loader, when: str) -> None:
        try:
            estimate = loader.estimate_resources()
        except Exception as exc:  # noqa: BLE001 - the loader's failure is what we report
            self.report(
                "estimate-raises",
                f"estimate_resources() raised {error_text(exc)} {when}; it is called at any "
                "time, also before load(), and must answer",
            )
            return
        previous, self._estimate = self._estimate, estimate
        if previous is not None and not previous.contains(estimate):
            self.report(
                "estimate-increases",
                f"estimate_resources() was {previous} and then {estimate} {when}: an estimate "
                "must never increase, or resources reserved for the load no longer cover it",
            )

    def _expect_no_servable(self, loader: Loader, check: str, when: str) -> None:
        try:
            servable = loader.servable()
        except Exception:  # noqa: BLE001 - raising is what the contract asks for
            return
        kind = _type_name(servable)
        del servable
        self.report(
            check,
            f"servable() returned {kind} {when} instead of raising: outside a successful "
            "load() and its unload() it must raise (FailedPreconditionError), so that no "
            "request is served by a model that is not loaded",
        )

    def _check_growth(self, check: str, growth: int, what: str, advice: str) -> None:
        limit = (
            self._max_growth_bytes
            if self._max_growth_bytes is not None
            else DEFAULT_MEMORY_GROWTH_BYTES + self._ram_estimate
        )
        if growth > limit:
            self.report(
                check,
                f"{what} grew the process's resident memory by {format_bytes(growth)}, more "
                f"than the {format_bytes(limit)} allowed (max_memory_growth_bytes): {advice}",
            )

    def _check_held(
        self, checks: tuple[str, str], before: Holdings, what: str, advice: str
    ) -> None:
        """Reports threads (as ``checks[0]``) and descriptors (``checks[1]``) left since then."""
        thread_check, fd_check = checks
        if thread_check not in self._skip:
            threads = thread_leak(before, self._max_thread_growth, _SETTLE_S)
            if threads is not None:
                self.report(
                    thread_check,
                    f"{what} left {threads} running, more than the {self._max_thread_growth} "
                    f"allowed (max_thread_growth): {advice}",
                )
        if fd_check not in self._skip:
            fds = fd_leak(before, self._max_fd_growth)
            if fds is not None:
                self.report(
                    fd_check,
                    f"{what} left {fds} open, more than the {self._max_fd_growth} allowed "
                    f"(max_fd_growth): {advice}",
                )


def _ram_bytes(estimate: ResourceAllocation | None) -> int:
    if estimate is None:
        return 0
    return sum(
        quantity
        for resource, quantity in estimate
        if resource.device == MAIN_DEVICE and resource.kind == RAM_IN_BYTES
    )


def _type_name(value: object) -> str:
    return "None" if value is None else type(value).__name__
