"""ResponseCacheConfig: the server's response cache, as Triton's ``--cache-config`` sets it."""

from __future__ import annotations

from typing import final

import attrs

from servinglib.errors import InvalidArgumentError, shortened


@final
@attrs.frozen
class ResponseCacheConfig:
    """One response cache shared by every model that asks for it, of ``size_bytes`` at most.

    Triton's ``local`` cache: its entries (the outputs' bytes and a small
    overhead each) never hold more than ``size_bytes``; the least recently
    used go first.  Immutable, so thread-safe.
    """

    size_bytes: int = attrs.field(validator=attrs.validators.ge(1))

    @classmethod
    def parse(cls, text: str) -> ResponseCacheConfig:
        """``local,size=BYTES`` (Triton's ``--cache-config`` value) as a config.

        Raises InvalidArgumentError for another cache (Triton's ``redis`` is
        not implemented), a key other than ``size``, and a size that is not
        a whole number of bytes above 0.
        """
        name, _, settings = text.partition(",")
        if name.strip() != "local":
            raise InvalidArgumentError(
                f"Cache config {shortened(text)!r}: servinglib implements Triton's 'local' "
                "cache only (local,size=BYTES)"
            )
        size: int | None = None
        for setting in filter(None, settings.split(",")):
            key, _, value = setting.partition("=")
            if key.strip() != "size":
                raise InvalidArgumentError(
                    f"Cache config {shortened(text)!r}: the local cache takes size=BYTES only, "
                    f"not {shortened(key.strip())!r}"
                )
            try:
                size = int(value.strip())
            except ValueError:
                size = 0
            if size < 1:
                raise InvalidArgumentError(
                    f"Cache config {shortened(text)!r}: size is a number of bytes above 0"
                )
        if size is None:
            raise InvalidArgumentError(
                f"Cache config {shortened(text)!r} sets no size: local,size=BYTES"
            )
        return cls(size)
