"""Tests of a request's extras: its id, sequence id and parameters, as models read them."""

from __future__ import annotations

import concurrent.futures
import contextvars

import pytest

from servinglib.errors import InvalidArgumentError
from servinglib.request_extras import (
    NO_EXTRAS,
    RequestExtras,
    request_extras,
    request_extras_scope,
)


def test_of_request_leaves_out_the_parameters_that_steer_the_server() -> None:
    """sequence_id becomes the correlation id; Triton's reserved keys are not the model's."""
    extras = RequestExtras.of_request(
        "r1",
        {"sequence_id": 7, "priority": 1, "timeout": 5, "signature_name": "s", "mine": "x"},
    )

    assert (extras.request_id, extras.correlation_id) == ("r1", 7)
    assert dict(extras.parameters) == {"mine": "x"}


def test_a_string_sequence_id_is_kept_and_others_are_no_sequence() -> None:
    """A string sequence id is the correlation id as sent; a bool or float one is none."""
    assert RequestExtras.of_request("", {"sequence_id": "s-1"}).correlation_id == "s-1"
    assert RequestExtras.of_request("", {"sequence_id": True}).correlation_id == 0
    assert RequestExtras.of_request("", {"sequence_id": 1.5}).correlation_id == 0


def test_a_request_with_nothing_extra_is_no_extras() -> None:
    """No id and no parameters: the shared NO_EXTRAS, which the scope does not even set."""
    assert RequestExtras.of_request("", {}) is NO_EXTRAS


def test_the_scope_sets_the_extras_and_a_copied_context_carries_them() -> None:
    """Inside the scope request_extras() is the request's, also on a pool thread; after, none."""
    extras = RequestExtras.of_request("r2", {"a": 1})

    with request_extras_scope(extras), concurrent.futures.ThreadPoolExecutor(1) as pool:
        context = contextvars.copy_context()
        on_worker = pool.submit(context.run, request_extras).result()
        assert request_extras() is extras

    assert on_worker is extras
    assert request_extras() is NO_EXTRAS


def test_the_sequence_flags_are_read_and_kept_out_of_the_parameters() -> None:
    """sequence_start and sequence_end become the extras' flags, not the model's parameters."""
    extras = RequestExtras.of_request(
        "", {"sequence_id": "s", "sequence_start": True, "sequence_end": False, "k": 1}
    )

    assert (extras.sequence_start, extras.sequence_end) == (True, False)
    assert dict(extras.parameters) == {"k": 1}
    assert not RequestExtras.of_request("", {"sequence_id": 3}).sequence_start


def test_a_sequence_flag_that_is_not_a_bool_is_invalid() -> None:
    """A sequence_start of 1 or "true" is refused, naming the parameter, not read as a flag."""
    for value in (1, "true"):
        with pytest.raises(InvalidArgumentError, match="'sequence_start' must be a bool"):
            RequestExtras.of_request("", {"sequence_id": 3, "sequence_start": value})
