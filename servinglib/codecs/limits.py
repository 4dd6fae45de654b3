"""DecodeLimits: how large a tensor decoded from a request may be, checked before allocating."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Final, final

import attrs

from servinglib.errors import InvalidArgumentError

_INT64_MAX: Final = 2**63 - 1
_MIB: Final = 1 << 20
_MAX_RANK: Final = 254  # TensorShape::MaxDimensions
_UNBOUNDED: Final = 2**63 - 1


@final
@attrs.frozen
class DecodeLimits:
    """The bounds every decoder of request tensors applies.

    ``max_elements``: a tensor with more elements, or a dimension larger, is
    refused (default 2^31).  ``max_fill_bytes``: the most bytes the fills of
    one request may create in all (default 64 MiB).  ``fill_ratio``: the most
    bytes a fill may create per byte of the tensors carrying the request's
    values (default 65536).
    Immutable, so thread-safe.
    """

    max_elements: int = attrs.field(default=2**31, validator=attrs.validators.gt(0))
    max_fill_bytes: int = attrs.field(default=64 * _MIB, validator=attrs.validators.ge(0))
    fill_ratio: int = attrs.field(default=1 << 16, validator=attrs.validators.ge(0))

    @classmethod
    def trusted(cls) -> DecodeLimits:
        """Fills as TensorFlow does, without bound: for tensors as trusted as the model itself.

        (Warmup records, shipped in the model's ``assets.extra``, are such tensors:
        ``tf.make_tensor_proto(0.0, shape=[64, 224, 224, 3])`` writes one value.)
        """
        return cls(max_fill_bytes=_UNBOUNDED, fill_ratio=_UNBOUNDED)

    def fill_budget(self, carried_bytes: Callable[[], int]) -> FillBudget:
        """A budget for the fills of one request; ``carried_bytes`` is asked on the first fill."""
        return FillBudget(self, carried_bytes)


DEFAULT_LIMITS: Final = DecodeLimits()
"""The limits of decoders not given any."""


@final
class FillBudget:
    """The bytes the fills of one request may still create (see :class:`DecodeLimits`).

    ``carried_bytes`` (the size of the tensors on the wire) is asked once, on
    the first fill, since working it out may cost a pass over the request.
    Not thread-safe: one budget per request, used by the thread decoding it.
    """

    def __init__(self, limits: DecodeLimits, carried_bytes: Callable[[], int]) -> None:
        self._limits = limits
        self._carried_bytes = carried_bytes
        self._left: int | None = None

    def take(self, nbytes: int, what: str) -> None:
        """Takes ``nbytes`` for a fill of ``what``; InvalidArgumentError if they are not left."""
        if self._left is None:
            limits = self._limits
            self._left = min(limits.max_fill_bytes, limits.fill_ratio * self._carried_bytes())
        if nbytes > self._left:
            raise InvalidArgumentError(
                f"{what} would be filled to {nbytes} bytes from the few values it carries; "
                f"the request may fill {self._left} bytes more (at most {self._limits.fill_ratio}"
                f" bytes per byte sent, {self._limits.max_fill_bytes} in all)"
            )
        self._left -= nbytes


def element_count(
    shape: Sequence[int], what: str | Callable[[], str], limits: DecodeLimits = DEFAULT_LIMITS
) -> int:
    """The number of elements of ``shape``, after checking a tensor of it may be allocated.

    ``what`` names the tensor for messages ("Input tensor 'x'"), or makes that
    name when an error needs it (saving the cost on every valid request).  Raises
    InvalidArgumentError for more than TensorFlow's 254 dimensions, a negative
    dimension, and non-zero dimensions multiplying to more than
    ``limits.max_elements`` (so also any count past int64; zeros are left out
    since numpy cannot hold an empty array of, say, [0, 2^40, 2^40] either).
    """
    if not shape:
        return 1
    if len(shape) > _MAX_RANK:
        raise InvalidArgumentError(
            f"{_name(what)} has {len(shape)} dimensions, more than the {_MAX_RANK} a tensor may"
            " have"
        )
    count = math.prod(shape)
    if 0 < count <= limits.max_elements and min(shape) > 0:
        return count  # every dimension positive, so none exceeds the count
    name = _name(what)
    if min(shape) < 0:
        raise InvalidArgumentError(f"{name} has a negative dimension in shape {list(shape)}")
    extent = count or math.prod([size for size in shape if size])
    if extent > limits.max_elements:
        overflow = " (past int64)" if extent > _INT64_MAX else ""
        raise InvalidArgumentError(
            f"{name} has shape {list(shape)}, whose non-zero dimensions multiply to"
            f" {extent}{overflow}: more than the {limits.max_elements} elements a tensor may have"
        )
    return count


def _name(what: str | Callable[[], str]) -> str:
    return what if isinstance(what, str) else what()
