"""Response extras: the holder a front end opens, and what a model's call sets in it."""

from __future__ import annotations

import concurrent.futures
import contextvars

import pytest

from servinglib.response_extras import (
    MAX_RESPONSE_PARAMETERS,
    current_response_extras,
    response_extras_scope,
    set_response_parameters,
)


def test_parameters_set_on_a_pool_thread_reach_the_scope_that_opened_the_holder() -> None:
    """The copied context refers to the same holder: what the worker sets, the front end reads."""
    with (
        response_extras_scope() as holder,
        concurrent.futures.ThreadPoolExecutor(1) as pool,
    ):
        context = contextvars.copy_context()
        pool.submit(context.run, set_response_parameters, {"a": 1, "b": "x"}).result()
        set_response_parameters({"a": 2})

    assert dict(holder.parameters()) == {"a": 2, "b": "x"}
    assert current_response_extras() is None


def test_without_a_scope_parameters_are_checked_and_dropped() -> None:
    """An embedded call sets nothing anywhere, but a bad parameter still raises."""
    set_response_parameters({"fine": True})
    with pytest.raises(ValueError, match="reserved"):
        set_response_parameters({"triton_final_response": True})


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ({"binary_data_size": 3}, "reserved"),
        ({"": 1}, "must be a string"),
        ({"big": 2**63}, "64-bit"),
        ({"list": [1]}, "bool, int, float or str"),
    ],
)
def test_a_bad_parameter_sets_none_of_them(parameters: dict[str, object], message: str) -> None:
    """ValueError naming what is wrong; the good names beside it are not set either."""
    with response_extras_scope() as holder, pytest.raises(ValueError, match=message):
        set_response_parameters({"good": 1, **parameters})  # type: ignore[dict-item]

    assert dict(holder.parameters()) == {}


def test_a_response_carries_a_bounded_number_of_parameters() -> None:
    """Past MAX_RESPONSE_PARAMETERS names a model's further parameters are refused."""
    with response_extras_scope() as holder:
        set_response_parameters({f"p{i}": i for i in range(MAX_RESPONSE_PARAMETERS)})
        set_response_parameters({"p0": "replaced"})
        with pytest.raises(ValueError, match="at most"):
            set_response_parameters({"one_more": 1})

    assert len(holder.parameters()) == MAX_RESPONSE_PARAMETERS
