"""HeaderForwarding: which request headers reach the model as parameters, as Triton forwards."""

from __future__ import annotations

import pytest

from servinglib.request_extras import NO_EXTRAS, RequestExtras
from servinglib.server.header_forwarding import HeaderForwarding

HEADERS = [
    ("my_header_1", "one"),
    ("x-my_header_2", "two"),
    ("header_3", "three"),
    ("MY_HEADER_4", "four"),
]


def test_a_header_whose_name_the_pattern_matches_anywhere_is_a_parameter() -> None:
    """The match is a search ignoring case: my_header.* takes x-my_header_2 and MY_HEADER_4."""
    extras = HeaderForwarding("my_header.*").extras(NO_EXTRAS, HEADERS)
    assert dict(extras.parameters) == {
        "my_header_1": "one",
        "x-my_header_2": "two",
        "MY_HEADER_4": "four",
    }


def test_a_leading_case_flag_makes_the_match_case_sensitive() -> None:
    """(?-i)MY_HEADER.* takes only the upper-case name, as Triton's RE2 flag does."""
    extras = HeaderForwarding("(?-i)MY_HEADER.*").extras(NO_EXTRAS, HEADERS)
    assert dict(extras.parameters) == {"MY_HEADER_4": "four"}


def test_credentials_reserved_names_and_binary_metadata_are_never_forwarded() -> None:
    """.* forwards everything but the withheld credential, sequence_id and -bin metadata."""
    headers = [
        ("authorization", "Bearer secret"),
        ("sequence_id", "9"),
        ("trace-bin", "x"),
        ("tenant", "a"),
    ]
    extras = HeaderForwarding(".*", withheld=["Authorization"]).extras(NO_EXTRAS, headers)
    assert dict(extras.parameters) == {"tenant": "a"}


def test_a_parameter_of_the_request_wins_over_a_header_of_its_name() -> None:
    """The body's parameter is kept; the other extras are unchanged."""
    extras = RequestExtras("id-1", 5, {"tenant": "from-body"})
    merged = HeaderForwarding("tenant|zone").extras(extras, [("tenant", "h"), ("zone", "eu")])
    assert dict(merged.parameters) == {"tenant": "from-body", "zone": "eu"}
    assert (merged.request_id, merged.correlation_id) == ("id-1", 5)


def test_no_forwarded_header_leaves_the_extras_as_they_were() -> None:
    """Nothing matched: the same object (the common case allocates nothing)."""
    assert HeaderForwarding("nothing").extras(NO_EXTRAS, HEADERS) is NO_EXTRAS


def test_a_pattern_that_is_not_a_regular_expression_is_refused_naming_it() -> None:
    """ValueError naming the pattern: the CLI turns it into a one-line flag error."""
    with pytest.raises(ValueError, match=r"'my_\(' is not a regular expression"):
        HeaderForwarding("my_(")
