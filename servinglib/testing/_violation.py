"""Violation: one broken promise found by a conformance check."""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Sequence
from typing import ParamSpec, final

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


_P = ParamSpec("_P")


def asserting(check: Callable[_P, list[Violation]], subject: str, name: str) -> Callable[_P, None]:
    """``check`` (a conformance check), raising AssertionError that lists every violation it
    finds instead of returning them, as the function ``name``."""

    @functools.wraps(check)
    def assert_conforms(*args: _P.args, **kwargs: _P.kwargs) -> None:
        violations = check(*args, **kwargs)
        if violations:
            raise AssertionError(violations_text(subject, violations))

    assert_conforms.__name__ = assert_conforms.__qualname__ = name
    assert_conforms.__doc__ = (
        f":func:`{check.__name__}`, raising AssertionError that lists every violation found."
    )
    return assert_conforms


def error_text(exc: BaseException) -> str:
    """An exception as its type and message, for violation messages."""
    return f"{type(exc).__name__}: {exc}"
