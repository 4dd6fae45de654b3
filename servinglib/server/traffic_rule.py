"""TrafficRule: which version of a model answers unaddressed requests, and which shadows it."""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, final

import attrs

from servinglib.errors import InvalidArgumentError

if TYPE_CHECKING:
    from servinglib.protos import model_server_config_pb2 as config_pb2


def _check_version(_instance: object, _attribute: object, version: int) -> None:
    if isinstance(version, bool) or not isinstance(version, int) or version < 0:
        raise InvalidArgumentError(f"traffic: a version must be an int >= 0, got {version!r}")


def _check_fraction(_instance: object, _attribute: object, fraction: float) -> None:
    if not isinstance(fraction, (int, float)) or math.isnan(fraction) or not 0 < fraction <= 1:
        raise InvalidArgumentError(f"traffic.shadow.fraction must be in (0, 1], got {fraction!r}")


def _check_tolerance(_instance: object, _attribute: object, tolerance: float) -> None:
    if not isinstance(tolerance, (int, float)) or not tolerance >= 0 or math.isinf(tolerance):
        raise InvalidArgumentError(
            f"traffic.shadow.tolerance must be a finite number >= 0, got {tolerance!r}"
        )


def _freeze_weights(weights: Mapping[int, int]) -> Mapping[int, int]:
    if not isinstance(weights, Mapping):
        raise TypeError(f"traffic.weights must map versions to weights, got {weights!r}")
    return MappingProxyType(dict(sorted(weights.items())))


def _check_weights(_instance: object, _attribute: object, weights: Mapping[int, int]) -> None:
    for version, weight in weights.items():
        _check_version(None, None, version)
        if not isinstance(weight, int) or isinstance(weight, bool) or weight < 0:
            raise InvalidArgumentError(
                f"traffic.weights: version {version}'s weight must be an int >= 0, got {weight!r}"
            )
    if weights and not any(weights.values()):
        raise InvalidArgumentError("traffic.weights: at least one weight must be > 0")


@final
@attrs.frozen(kw_only=True)
class ShadowRule:
    """A candidate ``version`` that gets a copy of ``fraction`` of a model's answered calls.

    Its outputs agree with the primary's when every element differs by at
    most ``tolerance`` (0: exactly equal; non-numeric outputs always
    exactly).  ``log_disagreements``: each disagreement is logged on
    ``servinglib.server.shadow`` with the request's id.  Raises
    InvalidArgumentError for a fraction outside (0, 1] or a negative
    tolerance.  Immutable, so thread-safe.
    """

    version: int = attrs.field(validator=_check_version)
    fraction: float = attrs.field(default=1.0, validator=_check_fraction)
    tolerance: float = attrs.field(default=0.0, validator=_check_tolerance)
    log_disagreements: bool = False


@final
@attrs.frozen(kw_only=True)
class TrafficRule:
    """A model's traffic: ``weights`` splitting the requests that name no version or label, and
    a ``shadow`` version.

    ``weights`` maps versions to integer weights (``{1: 90, 2: 10}``: 90 %
    and 10 %); empty: such requests go where the version policy sends
    them (the latest available).  ``sticky``: the choice is a hash of the
    request's id, so a client's retries of one request land on one version
    (requests without an id are chosen at random).  A version the rule
    names that is not available gets none of the traffic: its share goes
    to the version the policy serves, and the model's status says so.
    Raises InvalidArgumentError for a negative weight or all weights 0.
    Immutable, so thread-safe.
    """

    weights: Mapping[int, int] = attrs.field(
        factory=dict, converter=_freeze_weights, validator=_check_weights, hash=False
    )
    sticky: bool = False
    shadow: ShadowRule | None = None

    @classmethod
    def split(cls, weights: Mapping[int, int], *, sticky: bool = False) -> TrafficRule:
        """Requests naming no version split between versions by ``weights``."""
        return cls(weights=weights, sticky=sticky)

    @property
    def versions(self) -> tuple[int, ...]:
        """Every version the rule names (weighted, then the shadow), without repeats."""
        named = [v for v, weight in self.weights.items() if weight]
        if self.shadow is not None and self.shadow.version not in named:
            named.append(self.shadow.version)
        return tuple(named)

    def choose(self, request_id: str) -> int | None:
        """The version a request with ``request_id`` goes to; None: no weights.

        With ``sticky`` and a non-empty id, a pure function of the id;
        otherwise random.  Thread safety: any thread.
        """
        total = sum(self.weights.values())
        if not total:
            return None
        if self.sticky and request_id:
            digest = hashlib.blake2b(request_id.encode(), digest_size=8).digest()
            point = int.from_bytes(digest, "big") % total
        else:
            point = random.randrange(total)
        for version, weight in self.weights.items():
            if point < weight:
                return version
            point -= weight
        raise AssertionError("unreachable: point < total")  # pragma: no cover

    @classmethod
    def from_proto(cls, message: config_pb2.TrafficRule) -> TrafficRule:
        """Our ``TrafficRule`` message as a TrafficRule (an unset shadow fraction: 1)."""
        shadow = None
        if message.HasField("shadow"):
            shadow = ShadowRule(
                version=message.shadow.version,
                fraction=message.shadow.fraction or 1.0,
                tolerance=message.shadow.tolerance,
                log_disagreements=message.shadow.log_disagreements,
            )
        return cls(weights=dict(message.weights), sticky=message.sticky, shadow=shadow)

    def fill_proto(self, message: config_pb2.TrafficRule) -> None:
        """Writes this rule into ``message`` (a ``TrafficRule``)."""
        message.weights.update(self.weights)
        message.sticky = self.sticky
        if self.shadow is not None:
            message.shadow.version = self.shadow.version
            message.shadow.fraction = self.shadow.fraction
            message.shadow.tolerance = self.shadow.tolerance
            message.shadow.log_disagreements = self.shadow.log_disagreements
