"""check_source: connects a Source to a recorder and checks the aspired-versions semantics."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection
from typing import Any, TypeVar

from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId
from servinglib.sources.source import Source
from servinglib.sources.target import connect
from servinglib.testing._recording_target import AspiredVersionsCall, RecordingTarget
from servinglib.testing._violation import Violation, asserting, check_skip

S = TypeVar("S", bound=Source[Any])

SOURCE_CHECKS = ("emits", "complete-sets", "omission-unloads")
"""The ids of check_source's checks."""

_POLL_INTERVAL_S = 0.001


def check_source(
    source_factory: Callable[[], S],
    *,
    remove_version: Callable[[S, ServableId], None] | None = None,
    poll: Callable[[S], None] | None = None,
    close: Callable[[S], None] | None = None,
    timeout_s: float = 5.0,
    skip: Collection[str] = (),
) -> list[Violation]:
    """Connects a source from ``source_factory()`` to a recorder; returns what it breaks.

    Checks ("emits", "complete-sets", "omission-unloads"; ``skip`` names those
    not to report) and what each argument provides are listed in
    docs/guides/testing_loaders.md ("Check a Source").
    Requires: ``source_factory`` returns a source whose world holds at least
    one version; ``remove_version`` removes one from that world.
    Thread safety: runs on the calling thread; the source may emit from any.
    """
    skipped = check_skip(skip, SOURCE_CHECKS)
    violations: list[Violation] = []

    def report(check: str, message: str) -> None:
        if check not in skipped and all(v.check != check for v in violations):
            violations.append(Violation(check, message))

    source = source_factory()
    target: RecordingTarget[Any] = RecordingTarget()
    try:
        connect(source, target)
        waiter = _Waiter(source, target, poll, timeout_s)
        if not waiter.wait_for(bool):
            report(
                "emits",
                f"the source emitted nothing within {timeout_s} s of being connected: a "
                "source emits the aspired set of each servable it knows (an empty set if it "
                "has none); if it only looks when asked, pass poll=",
            )
            return violations
        for call in target.calls():
            _check_call(call, report)
        if remove_version is not None:
            _check_removal(source, target, waiter, remove_version, report)
            for call in target.calls():
                _check_call(call, report)
    finally:
        _close(source, close)
    return violations


assert_source_conforms = asserting(check_source, "The source", "assert_source_conforms")


class _Waiter:
    """Waits for the recorder's calls to satisfy a condition, polling the source meanwhile.

    Not thread-safe: used by one check, on one thread.
    """

    def __init__(
        self,
        source: S,
        target: RecordingTarget[Any],
        poll: Callable[[S], None] | None,
        timeout_s: float,
    ) -> None:
        self._poll: Callable[[], None] | None = (lambda: poll(source)) if poll else None
        self._target = target
        self.timeout_s = timeout_s

    def wait_for(self, condition: Callable[[list[AspiredVersionsCall[Any]]], bool]) -> bool:
        deadline = time.monotonic() + self.timeout_s
        while True:
            if self._poll is not None:
                self._poll()
            if condition(self._target.calls()):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(_POLL_INTERVAL_S)


def _check_call(call: AspiredVersionsCall[Any], report: Callable[[str, str], None]) -> None:
    seen: set[int] = set()
    items: tuple[object, ...] = call.versions  # what an untyped source may really send
    for item in items:
        if not isinstance(item, ServableData):
            report(
                "complete-sets",
                f"the set emitted for {call.name} holds {item!r}, not a ServableData",
            )
            return
        if item.id.name != call.name:
            report(
                "complete-sets",
                f"the set emitted for {call.name} holds {item.id}, a version of another "
                "servable: each set names only the servable it is for",
            )
        if item.id.version in seen:
            report(
                "complete-sets",
                f"the set emitted for {call.name} holds version {item.id.version} twice: a set "
                "lists each aspired version once (a manager rejects it)",
            )
        seen.add(item.id.version)


def _check_removal(
    source: S,
    target: RecordingTarget[Any],
    waiter: _Waiter,
    remove_version: Callable[[S, ServableId], None],
    report: Callable[[str, str], None],
) -> None:
    candidates = [
        (name, versions)
        for name in sorted({call.name for call in target.calls()})
        if (versions := target.last(name))
    ]
    if not candidates:
        report(
            "omission-unloads",
            "every set the source emitted is empty, so removing a version could not be "
            "checked: give the source a world with at least one version",
        )
        return
    name, versions = candidates[0]
    removed = ServableId(name, max(item.id.version for item in versions))
    before = len(target.calls(name))
    remove_version(source, removed)

    def emitted_without(calls: list[AspiredVersionsCall[Any]]) -> bool:
        mine = [call for call in calls if call.name == name][before:]
        return any(removed.version not in call.version_numbers for call in mine)

    if waiter.wait_for(emitted_without):
        return
    after = target.calls(name)[before:]
    seen = "; ".join(str(list(call.version_numbers)) for call in after) if after else "no new set"
    report(
        "omission-unloads",
        f"after version {removed.version} of {name} was removed, the source emitted {seen} "
        f"for {name} within {waiter.timeout_s} s: its next set must leave the version out "
        "(sets are complete: a version left out is unloaded; an empty set unloads all)",
    )


def _close(source: S, close: Callable[[S], None] | None) -> None:
    if close is not None:
        close(source)
        return
    own = getattr(source, "close", None)
    if callable(own):
        own()
