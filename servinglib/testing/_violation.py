"""Violation: one broken promise found by a conformance check."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import final

import attrs


@final
@attrs.frozen
class Violation:
    """One way a Loader or Source breaks its contract, found by a conformance check.

    ``check`` is the id of the check that found it (e.g. ``"unload-releases"``;
    the guide docs/guides/testing_loaders.md explains each), ``message`` says
    what happened and what the contract asks for.  Immutable, so thread-safe.
    """

    check: str
    message: str

    def __str__(self) -> str:
        return f"{self.check}: {self.message}"


def check_skip(skip: Collection[str], known: Collection[str]) -> frozenset[str]:
    """``skip`` as a set; ValueError naming the unknown ids (a typo would skip nothing)."""
    unknown = sorted(set(skip) - set(known))
    if unknown:
        raise ValueError(f"unknown check ids {unknown}; known: {sorted(known)}")
    return frozenset(skip)


def violations_text(subject: str, violations: Sequence[Violation]) -> str:
    """An AssertionError message listing ``violations`` of ``subject``, one per line."""
    lines = [f"{subject} breaks its contract in {len(violations)} way(s):"]
    lines.extend(f"  - {violation}" for violation in violations)
    return "\n".join(lines)


def error_text(exc: BaseException) -> str:
    """An exception as its type and message, for violation messages."""
    return f"{type(exc).__name__}: {exc}"
