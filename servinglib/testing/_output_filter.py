"""Calling a servable's signatures with an output filter: each must return what was asked."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping

from servinglib.servable import ExecutionMode, Servable, SignatureSpec, Tensors
from servinglib.testing._concurrent_calls import same_result, signature_call, signature_inputs
from servinglib.testing._violation import error_text


def output_filter_problems(servable: object, inputs: Mapping[str, Tensors]) -> list[str]:
    """How ``servable``'s signatures break ``output_filter`` (empty: not at all, or not a Servable).

    Each signature is called twice without a filter, then with each of its
    outputs alone as the filter: a filtered call must return exactly that
    output, with the value the unfiltered calls gave it (judged only when
    they agree).  A signature that fails unfiltered is left to the
    concurrent-calls check.  One problem at most per signature.
    """
    if not isinstance(servable, Servable):
        return []
    problems = []
    for name, spec in sorted(servable.signatures.items()):
        tensors, origin = signature_inputs(name, spec, inputs)
        call = signature_call(servable, name, spec, tensors)
        try:
            whole, again = call(), call()
        except Exception:  # noqa: BLE001 - reported by the concurrent-calls check
            continue
        expected = whole if same_result(whole, again) else None
        for output in sorted(spec.outputs):
            problem = _filter_problem(servable, name, spec, tensors, output, expected=expected)
            if problem is not None:
                problems.append(f"signature '{name}' {origin} {problem}")
                break
    return problems


def _filter_problem(
    servable: Servable,
    name: str,
    spec: SignatureSpec,
    tensors: Tensors,
    output: str,
    *,
    expected: object,
) -> str | None:
    """What is wrong with the call filtered to ``output``, compared with ``expected`` if given."""
    try:
        got = _raw_call(servable, name, spec, tensors, frozenset({output}))
    except Exception as exc:  # noqa: BLE001 - the servable's failure is what we report
        return f"raised with output_filter {{{output!r}}} but not without one: {error_text(exc)}"
    if not isinstance(got, Mapping) or set(got) != {output}:
        returned = sorted(map(str, got)) if isinstance(got, Mapping) else type(got).__name__
        return (
            f"returned {returned} for output_filter {{{output!r}}}: call() must return exactly "
            "the outputs in output_filter, or every request naming the outputs it wants "
            "(gRPC Predict's output_filter, V2's outputs) fails with INTERNAL"
        )
    if isinstance(expected, Mapping) and not same_result(got[output], expected.get(output)):
        return (
            f"returned another value for {output!r} with output_filter {{{output!r}}} than "
            "without one: the filter chooses outputs, it must not change them"
        )
    return None


def _raw_call(
    servable: Servable,
    name: str,
    spec: SignatureSpec,
    tensors: Tensors,
    output_filter: frozenset[str],
) -> object:
    """The servable's own call, unchecked, so what it returns can be reported."""
    if spec.execution_mode is ExecutionMode.ASYNC:
        return asyncio.run(servable.call_async(name, tensors, output_filter))
    return servable.call(name, tensors, output_filter)
