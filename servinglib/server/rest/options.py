"""RestOptions: how the REST front end answers (timeouts, body limit, CORS)."""

from __future__ import annotations

from typing import final

import attrs

from servinglib.codecs.limits import DEFAULT_LIMITS, DecodeLimits
from servinglib.server.auth.restricted_apis import UNRESTRICTED, RestrictedApis
from servinglib.server.header_forwarding import HeaderForwarding

_MIB = 1 << 20


def _positive_or_none(
    _instance: object, attribute: attrs.Attribute[float], value: float | None
) -> None:
    if value is not None and not value > 0:
        raise ValueError(f"{attribute.name} must be > 0 or None, got {value!r}")


@final
@attrs.frozen
class RestOptions:
    """Options of the REST app (:func:`servinglib.server.rest.create_app`).

    Each field, its default and unit: docs/guides/rest.md.
    ``request_timeout_s``: deadline of each model call from when the body has
    arrived (504 past it; None: none).  Larger bodies than
    ``max_request_body_bytes`` are refused with 413 before they are read whole.
    ``server_name`` / ``server_version``: what ``GET /v2`` reports.
    ``restricted_apis``: the API groups whose requests need a credential
    (``--http_restricted_api``; default: none, every group open).
    ``header_forwarding``: the headers of V2 inference requests that reach the model as
    request parameters (``--http_header_forward_pattern``; default: none).
    Immutable, so thread-safe.
    """

    request_timeout_s: float | None = attrs.field(default=30.0, validator=_positive_or_none)
    max_request_body_bytes: int = attrs.field(default=64 * _MIB, validator=attrs.validators.gt(0))
    enable_cors_support: bool = False
    decode_limits: DecodeLimits = DEFAULT_LIMITS
    server_name: str = "servinglib"
    restricted_apis: RestrictedApis = UNRESTRICTED
    header_forwarding: HeaderForwarding | None = None
    server_version: str = attrs.field()

    @server_version.default
    def _default_version(self) -> str:
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("servinglib")
        except PackageNotFoundError:
            return "0"
