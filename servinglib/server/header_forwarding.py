"""Request headers that reach the model as request parameters (Triton's header forwarding)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import final

from servinglib.request_extras import RequestExtras, is_reserved

_CASE_SENSITIVE = "(?-i)"
_MAX_PATTERN = 1000


@final
class HeaderForwarding:
    """Which headers (REST) or metadata (gRPC) of an inference request reach its model, each
    as a string request parameter named after it, as Triton's ``--http_header_forward_pattern``
    and ``--grpc_header_forward_pattern`` forward them.

    A header is forwarded when ``pattern`` matches somewhere in its name, ignoring case
    (a leading ``(?-i)`` makes the match case-sensitive).  Never forwarded: the names in
    ``withheld`` (the credentials of restricted API groups: a pattern ``.*`` must not hand a
    token to the model, its logs or its answers), reserved parameter names, and binary gRPC
    metadata (``-bin``).  A parameter the request sets itself wins over a header of its name.
    Immutable, so thread-safe.
    """

    def __init__(self, pattern: str, withheld: Iterable[str] = ()) -> None:
        """Raises ValueError naming ``pattern`` when it is not a regular expression."""
        if len(pattern) > _MAX_PATTERN:
            raise ValueError(f"A header forward pattern is at most {_MAX_PATTERN} characters")
        flags: re.RegexFlag | int = re.IGNORECASE
        source = pattern
        if source.startswith(_CASE_SENSITIVE):
            flags, source = 0, source[len(_CASE_SENSITIVE) :]
        try:
            self._pattern = re.compile(source, flags)
        except re.error as error:
            raise ValueError(f"{pattern!r} is not a regular expression: {error}") from None
        self._withheld = frozenset(name.lower() for name in withheld)
        self.pattern = pattern

    def extras(self, extras: RequestExtras, headers: Iterable[tuple[str, str]]) -> RequestExtras:
        """``extras`` with the forwarded ``headers`` (name, value) among its parameters."""
        forwarded = {
            name: value
            for name, value in headers
            if name.lower() not in self._withheld
            and not is_reserved(name.lower())
            and not name.endswith("-bin")
            and name not in extras.parameters
            and self._pattern.search(name)
        }
        return extras.with_parameters(forwarded) if forwarded else extras

    def __repr__(self) -> str:
        return f"HeaderForwarding({self.pattern!r})"
