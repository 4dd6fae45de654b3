"""RestrictedApis: which API groups need a credential, in which header, and the check."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final, final

import attrs

from servinglib.errors import PermissionDeniedError, UnauthenticatedError
from servinglib.server.auth.api_groups import ApiGroup
from servinglib.server.auth.credential import Credential

GRPC_KEY_PREFIX: Final = "triton-grpc-protocol-"
"""What ``--grpc_restricted_protocol`` puts before its KEY, as Triton does: the metadata key
a gRPC client sends is ``triton-grpc-protocol-<KEY>``."""

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9a-z-]+")  # an HTTP field name (RFC 9110), lower-cased


def _groups(groups: Iterable[ApiGroup]) -> frozenset[ApiGroup]:
    return frozenset(groups)


def _lower(key: str) -> str:
    return key.lower()


def _restrictions(restrictions: Iterable[Restriction]) -> tuple[Restriction, ...]:
    return tuple(restrictions)


@final
@attrs.frozen
class Restriction:
    """Requests of ``groups`` must carry ``credential`` in the header (metadata) ``key``.

    ``key`` is matched lower-case (HTTP header names and gRPC metadata keys
    are case-insensitive).  :meth:`check` raises UnauthenticatedError (401 /
    UNAUTHENTICATED) without the header, PermissionDeniedError (403 /
    PERMISSION_DENIED) with another value; messages name the header, never
    a value.  Immutable (the credential's file is re-read behind it), so
    thread-safe.
    """

    groups: frozenset[ApiGroup] = attrs.field(converter=_groups)
    key: str = attrs.field(converter=_lower)
    credential: Credential = attrs.field(eq=False)

    @groups.validator
    def _some(self, _attribute: object, groups: frozenset[ApiGroup]) -> None:
        if not groups:
            raise ValueError("A restriction names at least one API group")

    @key.validator
    def _token(self, _attribute: object, key: str) -> None:
        if not _TOKEN.fullmatch(key) or key.endswith("-bin"):
            raise ValueError(
                f"{key[:100]!r} cannot be a header name (letters, digits and - _ . only; "
                "gRPC keys must not end in -bin)"
            )

    def check(self, group: ApiGroup, presented: bytes | None) -> None:
        """Returns if ``presented`` (the header's value, None when absent) is the credential."""
        if presented is None:
            raise UnauthenticatedError(
                f"The {group.value} API is restricted: send its credential in the header "
                f"'{self.key}'"
            )
        if not self.credential.matches(presented):
            raise PermissionDeniedError(
                f"The credential in the header '{self.key}' is not the one the "
                f"{group.value} API requires"
            )


@final
@attrs.frozen
class RestrictedApis:
    """The restrictions of one transport; groups none names are open.  Immutable.

    ``restrictions`` name each group at most once (ValueError otherwise, as
    Triton refuses a group in two flags).
    """

    restrictions: tuple[Restriction, ...] = attrs.field(default=(), converter=_restrictions)

    @restrictions.validator
    def _once(self, _attribute: object, restrictions: tuple[Restriction, ...]) -> None:
        seen: set[ApiGroup] = set()
        for restriction in restrictions:
            twice = seen & restriction.groups
            if twice:
                name = min(group.value for group in twice)
                raise ValueError(f"API group {name!r} is restricted twice: name it once")
            seen |= restriction.groups

    @classmethod
    def http(cls, flag_values: Iterable[str]) -> RestrictedApis:
        """From ``--http_restricted_api`` values: ``GROUP[,GROUP...]:HEADER=VALUE``.

        VALUE ``@PATH`` is read from that file (:class:`Credential`).
        Raises ValueError naming what is wrong, OSError for an unreadable file.
        """
        return cls(_parse(value, "") for value in flag_values)

    @classmethod
    def grpc(cls, flag_values: Iterable[str]) -> RestrictedApis:
        """From ``--grpc_restricted_protocol`` values: ``GROUP[,GROUP...]:KEY=VALUE``.

        The metadata key clients send is ``triton-grpc-protocol-<KEY>`` (Triton's);
        otherwise as :meth:`http`.
        """
        return cls(_parse(value, GRPC_KEY_PREFIX) for value in flag_values)

    def __bool__(self) -> bool:
        return bool(self.restrictions)

    def by_api(self, groups: Mapping[str, ApiGroup]) -> dict[str, tuple[ApiGroup, Restriction]]:
        """For each API of ``groups`` (an API name to its group) whose group is restricted:
        its group and restriction."""
        restriction_of = {group: r for r in self.restrictions for group in r.groups}
        return {
            api: (group, restriction_of[group])
            for api, group in groups.items()
            if group in restriction_of
        }


UNRESTRICTED: Final = RestrictedApis()
"""No group restricted: the default of both front ends."""


def _parse(text: str, key_prefix: str) -> Restriction:
    """``GROUP[,GROUP...]:KEY=VALUE`` (Triton's syntax: the first ``:``, then the first ``=``)."""
    names, colon, setting = text.partition(":")
    key, equals, value = setting.partition("=")
    if not colon or not equals or not names or not key or not value:
        # Not quoted: the text holds the credential.
        raise ValueError(
            "a restriction is GROUP[,GROUP...]:KEY=VALUE "
            "(e.g. inference,metadata:authorization=@/run/secrets/token)"
        )
    groups = [ApiGroup.named(name.strip()) for name in names.split(",")]
    if len(set(groups)) != len(groups):
        raise ValueError(f"{names[:100]!r} names an API group twice")
    return Restriction(groups, key_prefix + key.strip(), Credential.parse(value))
