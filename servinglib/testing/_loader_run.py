"""One check_loader run: the Loader contract's checks, in order, and the violations found."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs

from servinglib.core.loader import Loader
from servinglib.core.resources import MAIN_DEVICE, RAM_IN_BYTES, ResourceAllocation
from servinglib.servable import Tensors
from servinglib.testing._concurrent_calls import concurrent_call_problems
from servinglib.testing._leaks import Holdings, fd_leak, thread_leak
from servinglib.testing._memory import format_bytes, resident_bytes
from servinglib.testing._output_filter import output_filter_problems
from servinglib.testing._referrers import describe_referrers
from servinglib.testing._violation import Violation, error_text

L = TypeVar("L", bound=Loader)

DEFAULT_MEMORY_GROWTH_BYTES = 64 * 2**20
_SETTLE_S = 2.0  # how long threads started by the cycles get to end by themselves


@attrs.frozen(kw_only=True)
class RunSettings:
    """check_loader's options, as it documents them.  Immutable."""

    cycles: int
    concurrent_calls: int
    calls_per_thread: int
    inputs: Mapping[str, Tensors]
    call: Callable[[Any], object] | None
    ram_slack_bytes: int
    max_memory_growth_bytes: int | None
    max_thread_growth: int
    max_fd_growth: int
    timeout_s: float
    skip: frozenset[str]


class LoaderRun:
    """One check_loader run: its settings, the violations found, the estimates seen.

    Not thread-safe: one run, on one thread.
    """

    def __init__(self, settings: RunSettings) -> None:
        self._settings = settings
        self._skip = settings.skip
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
        if growth <= self._ram_estimate + self._settings.ram_slack_bytes:
            return
        self.report(
            "estimate-too-low",
            f"load() grew the process's resident memory by {format_bytes(growth)}, more than "
            f"its RAM estimate of {format_bytes(self._ram_estimate)} (+ "
            f"{format_bytes(self._settings.ram_slack_bytes)} slack): estimate_resources() must "
            "be an upper bound of what load() uses, or a ResourceTracker admits loads that do not "
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
                threads=self._settings.concurrent_calls,
                calls_per_thread=self._settings.calls_per_thread,
                inputs=self._settings.inputs,
                call=self._settings.call,
                timeout_s=self._settings.timeout_s,
            ):
                self.report("concurrent-calls", problem)
        if "output-filter" not in self._skip:
            for problem in output_filter_problems(servable, self._settings.inputs):
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
        for cycle in range(2, self._settings.cycles + 1):
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
        if baseline is not None and end is not None and self._settings.cycles > 1:
            self._check_growth(
                "memory-growth",
                end - baseline,
                f"{self._settings.cycles - 1} more load → unload cycles",
                "unload() must release everything load() acquired (caches, module state, files)",
            )
        if self._settings.cycles > 1:
            self._check_held(
                ("thread-growth", "fd-growth"),
                held,
                f"{self._settings.cycles - 1} more load → unload cycles",
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
        for attempt in range(1, self._settings.cycles + 1):
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
        if baseline is not None and end is not None and self._settings.cycles > 1:
            self._check_growth(
                "failed-load-clean",
                end - baseline,
                f"{self._settings.cycles - 1} more failed loads",
                "a failed load() must release what it acquired before raising",
            )
        if held is not None and self._settings.cycles > 1:
            self._check_held(
                ("failed-load-clean", "failed-load-clean"),
                held,
                f"{self._settings.cycles - 1} more failed loads",
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
            self._settings.max_memory_growth_bytes
            if self._settings.max_memory_growth_bytes is not None
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
            threads = thread_leak(before, self._settings.max_thread_growth, _SETTLE_S)
            if threads is not None:
                self.report(
                    thread_check,
                    f"{what} left {threads} running, more than the "
                    f"{self._settings.max_thread_growth} allowed (max_thread_growth): {advice}",
                )
        if fd_check not in self._skip:
            fds = fd_leak(before, self._settings.max_fd_growth)
            if fds is not None:
                self.report(
                    fd_check,
                    f"{what} left {fds} open, more than the {self._settings.max_fd_growth} allowed "
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
