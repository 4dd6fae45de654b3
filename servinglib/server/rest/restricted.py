"""The REST side of restricted API groups: a request's header checked against its group."""

from __future__ import annotations

from collections.abc import Iterable

from servinglib.server.auth.api_groups import ApiGroup
from servinglib.server.auth.restricted_apis import Restriction

Locked = tuple[ApiGroup, Restriction]
"""A route's group and the restriction on it."""


def check_headers(locked: Locked, headers: Iterable[tuple[bytes, bytes]]) -> None:
    """Returns if ``headers`` (an ASGI scope's: lower-case names) carry the group's credential.

    Raises UnauthenticatedError without the header, PermissionDeniedError
    with another value (the first of repeated headers counts).
    """
    group, restriction = locked
    key = restriction.key.encode("latin-1")
    for name, value in headers:
        if name == key:
            restriction.check(group, value)
            return
    restriction.check(group, None)
