"""Response extras: the holder a front end opens, and what a model's call sets in it."""

from __future__ import annotations

import concurrent.futures
import contextvars

import pytest

from servinglib.response_extras import (
    MAX_RESPONSE_PARAMETERS,
    ResponseExtras,
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


@pytest.mark.parametrize(
    ("headers", "said"),
    [
        ({"bad name": "x"}, "token"),
        ({"x-a": "one\r\ntwo"}, "one line"),
        ({"content-type": "text/plain"}, "server's"),
        ({"grpc-status": "0"}, "server's"),
        ({"trace-bin": "x"}, "server's"),
        ({"x-big": "v" * 9000}, "8 KiB"),
    ],
)
def test_a_header_a_model_may_not_set_is_refused_naming_why(
    headers: dict[str, str], said: str
) -> None:
    """Names that are not tokens, values with line breaks or too long, the server's own
    headers: ValueError, nothing set."""
    holder = ResponseExtras()
    with pytest.raises(ValueError, match=said):
        holder.set_headers(headers)
    assert holder.headers() == {}


def test_headers_are_lower_cased_replaced_and_bounded() -> None:
    """Names are lower-cased; a later value replaces; past 64 headers, refused."""
    holder = ResponseExtras()
    holder.set_headers({"X-Trace": "a"})
    holder.set_headers({"x-trace": "b"})
    assert holder.headers() == {"x-trace": "b"}
    with pytest.raises(ValueError, match="at most 64"):
        holder.set_headers({f"x-{i}": "v" for i in range(64)})
