"""Calling a servable from several threads at once, and comparing with serial calls."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt

from servinglib.servable import (
    ExecutionMode,
    Servable,
    SignatureSpec,
    Tensors,
    call_signature,
    call_signature_async,
)
from servinglib.testing._violation import error_text

_UNKNOWN_RANK_SHAPE = (1,)


def zero_inputs(signature: SignatureSpec) -> dict[str, npt.NDArray[Any]]:
    """Inputs that fit ``signature``: zeros of each input's dtype and shape.

    A dimension of unknown size (-1) is 1; an input of unknown rank is a
    vector of one element; string inputs hold ``b""``.
    """
    inputs: dict[str, npt.NDArray[Any]] = {}
    for name, spec in signature.inputs.items():
        shape = _UNKNOWN_RANK_SHAPE if spec.shape is None else tuple(max(d, 1) for d in spec.shape)
        if spec.is_string:
            inputs[name] = np.full(shape, b"", dtype=object)
        else:
            inputs[name] = np.zeros(shape, dtype=spec.dtype)
    return inputs


def concurrent_call_problems(
    servable: object,
    *,
    threads: int,
    calls_per_thread: int,
    inputs: Mapping[str, Tensors],
    call: Callable[[Any], object] | None,
    timeout_s: float,
) -> list[str]:
    """Why calls of ``servable`` from ``threads`` threads at once are unsafe (empty: none seen).

    Each probe (each signature of a Servable, or ``call(servable)``) is run
    twice alone for the expected result (a probe whose two results differ is
    not deterministic and is not judged), then ``calls_per_thread`` times in
    each thread, all starting together.
    """
    problems = []
    for probe in _probes(servable, inputs, call):
        label = probe.label
        try:
            expected = probe.run()
            again = probe.run()
        except Exception as exc:  # noqa: BLE001 - the servable's failure is what we report
            problems.append(f"{label} raised when called alone {probe.origin}: {error_text(exc)}")
            continue
        if not same_result(expected, again):
            continue
        problem = _run_together(
            label,
            probe.run,
            expected,
            threads=threads,
            calls_per_thread=calls_per_thread,
            timeout_s=timeout_s,
        )
        if problem is not None:
            problems.append(problem)
    return problems


def same_result(first: object, second: object) -> bool:
    """True when two call results are equal: mappings key by key, arrays by dtype, shape, values."""
    if isinstance(first, Mapping) and isinstance(second, Mapping):
        return first.keys() == second.keys() and all(
            same_result(first[key], second[key]) for key in first
        )
    if isinstance(first, np.ndarray) or isinstance(second, np.ndarray):
        a, b = np.asarray(first), np.asarray(second)
        if a.shape != b.shape or a.dtype != b.dtype:
            return False
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    try:
        return bool(first == second)
    except Exception:  # noqa: BLE001 - objects that cannot be compared are not the same
        return False


@attrs.frozen
class _Probe:
    """One way to call the servable, with what to say about it.  Immutable."""

    label: str  # what is called, for messages
    origin: str  # where its inputs come from, for messages
    run: Callable[[], object]


def _probes(
    servable: object, inputs: Mapping[str, Tensors], call: Callable[[Any], object] | None
) -> list[_Probe]:
    if call is not None:
        return [_Probe("call(servable)", "(the call given)", lambda: call(servable))]
    if not isinstance(servable, Servable):
        return []
    probes = []
    for name, spec in sorted(servable.signatures.items()):
        tensors, origin = signature_inputs(name, spec, inputs)
        probes.append(
            _Probe(f"signature '{name}'", origin, signature_call(servable, name, spec, tensors))
        )
    return probes


def signature_inputs(
    name: str, spec: SignatureSpec, inputs: Mapping[str, Tensors]
) -> tuple[Tensors, str]:
    """The inputs to call signature ``name`` with (``inputs[name]``, else zeros), and whence."""
    given = inputs.get(name)
    if given is not None:
        return given, "with the inputs given"
    return (
        zero_inputs(spec),
        "with zeros built from its input specs (pass inputs={signature: tensors} it accepts)",
    )


def signature_call(
    servable: Servable, name: str, spec: SignatureSpec, tensors: Tensors
) -> Callable[[], object]:
    """A call of signature ``name`` on ``tensors`` as front ends make it, in its execution mode."""
    if spec.execution_mode is ExecutionMode.ASYNC:
        return lambda: asyncio.run(call_signature_async(servable, name, tensors))
    return lambda: call_signature(servable, name, tensors)


def _run_together(
    label: str,
    probe: Callable[[], object],
    expected: object,
    *,
    threads: int,
    calls_per_thread: int,
    timeout_s: float,
) -> str | None:
    barrier = threading.Barrier(threads)
    results: list[list[object]] = [[] for _ in range(threads)]
    errors: list[str] = []

    def work(mine: list[object]) -> None:
        try:
            barrier.wait(timeout_s)
            for _ in range(calls_per_thread):
                mine.append(probe())
        except Exception as exc:  # noqa: BLE001 - reported, never raised across threads
            errors.append(error_text(exc))

    workers = [
        threading.Thread(target=work, args=(results[i],), name=f"check-call-{i}", daemon=True)
        for i in range(threads)
    ]
    for worker in workers:
        worker.start()
    deadline = time.monotonic() + timeout_s  # one deadline for all: a deadlock costs timeout_s
    for worker in workers:
        worker.join(max(0.0, deadline - time.monotonic()))
    if any(worker.is_alive() for worker in workers):
        return (
            f"{label} did not return within {timeout_s} s when called from {threads} threads at "
            "once (a deadlock?)"
        )
    if errors:
        return (
            f"{label} raised when called from {threads} threads at once, but not when called "
            f"alone: {errors[0]} ({len(errors)} thread(s) failed)"
        )
    got = [result for mine in results for result in mine]
    wrong = [result for result in got if not same_result(expected, result)]
    if not wrong:
        return None
    example = _difference(expected, wrong[0])
    return (
        f"{label} gave other results when called from {threads} threads at once than when "
        f"called alone ({len(wrong)} of {len(got)} calls differ; e.g. {example}): it is not "
        "thread-safe; make calls share no mutable state, or serialize them with a lock"
    )


def _difference(expected: object, got: object) -> str:
    if isinstance(expected, Mapping) and isinstance(got, Mapping):
        if expected.keys() != got.keys():
            return f"outputs {sorted(map(str, got))} instead of {sorted(map(str, expected))}"
        for key in expected:
            if not same_result(expected[key], got[key]):
                return f"'{key}' is {_short(got[key])} instead of {_short(expected[key])}"
    return f"{_short(got)} instead of {_short(expected)}"


def _short(value: object) -> str:
    text = (
        np.array2string(value, threshold=6, edgeitems=2)
        if isinstance(value, np.ndarray)
        else repr(value)
    )
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."
