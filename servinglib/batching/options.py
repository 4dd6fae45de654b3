"""BatchingParameters: TF Serving's batching knobs, and its batching parameters text file."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterable
from typing import Any, final

import attrs

from servinglib.errors import InvalidArgumentError

DEFAULT_MAX_BATCH_SIZE = 1000
DEFAULT_MAX_ENQUEUED_BATCHES = 10
DEFAULT_THREAD_POOL_NAME = "batch_threads"


def _default_threads() -> int:
    return os.cpu_count() or 1


def _sizes(value: Iterable[int]) -> tuple[int, ...]:
    return tuple(int(v) for v in value)


def _size_set(value: Iterable[int]) -> frozenset[int]:
    return frozenset(int(v) for v in value)


@final
@attrs.frozen
class BatchingParameters:
    """How one model's requests are batched (TF Serving's ``BatchingParameters``, same defaults).

    Each field, its default and unit: docs/guides/batching.md.  A request
    beyond ``max_enqueued_batches`` is refused at once with UNAVAILABLE;
    ``num_batch_threads`` is taken from the server-wide parameters (ignored in
    a model's own file); with ``enable_large_batch_splitting``,
    ``max_execution_batch_size`` bounds the batches and ``max_batch_size``
    only the requests.  ``preferred_batch_sizes`` (Triton's ``preferred_batch_size``): a
    waiting batch whose first requests add up to one of them runs as soon as a batch thread
    is free, the largest such first part, the rest waiting on.
    Immutable, so thread-safe.
    """

    max_batch_size: int = attrs.field(
        default=DEFAULT_MAX_BATCH_SIZE, validator=attrs.validators.ge(1)
    )
    batch_timeout_s: float = attrs.field(default=0.0, validator=attrs.validators.ge(0))
    max_enqueued_batches: int = attrs.field(
        default=DEFAULT_MAX_ENQUEUED_BATCHES, validator=attrs.validators.ge(1)
    )
    num_batch_threads: int = attrs.field(factory=_default_threads, validator=attrs.validators.ge(1))
    thread_pool_name: str = DEFAULT_THREAD_POOL_NAME
    allowed_batch_sizes: tuple[int, ...] = attrs.field(default=(), converter=_sizes)
    pad_variable_length_inputs: bool = False
    enable_large_batch_splitting: bool = False
    max_execution_batch_size: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(1))
    )
    preferred_batch_sizes: frozenset[int] = attrs.field(default=frozenset(), converter=_size_set)

    def __attrs_post_init__(self) -> None:
        largest = self.execution_batch_size
        if self.max_execution_batch_size is not None:
            if not self.enable_large_batch_splitting:
                raise InvalidArgumentError(
                    "max_execution_batch_size needs enable_large_batch_splitting"
                )
            if self.max_execution_batch_size > self.max_batch_size:
                raise InvalidArgumentError(
                    f"max_execution_batch_size ({self.max_execution_batch_size}) must not exceed "
                    f"max_batch_size ({self.max_batch_size})"
                )
        if any(not 1 <= size <= largest for size in self.preferred_batch_sizes):
            raise InvalidArgumentError(
                f"preferred batch sizes must be between 1 and the largest batch ({largest}), "
                f"got {sorted(self.preferred_batch_sizes)}"
            )
        sizes = self.allowed_batch_sizes
        if not sizes:
            return
        if any(s < 1 for s in sizes) or any(a >= b for a, b in itertools.pairwise(sizes)):
            raise InvalidArgumentError(
                f"allowed_batch_sizes must be positive and increasing, got {list(sizes)}"
            )
        if sizes[-1] != largest:
            which = (
                "max_execution_batch_size"
                if self.enable_large_batch_splitting
                else "max_batch_size"
            )
            raise InvalidArgumentError(
                f"The last allowed batch size ({sizes[-1]}) must equal {which} ({largest})"
            )

    @property
    def execution_batch_size(self) -> int:
        """The largest batch that runs."""
        if self.enable_large_batch_splitting and self.max_execution_batch_size is not None:
            return self.max_execution_batch_size
        return self.max_batch_size

    def padded_size(self, size: int) -> int:
        """The batch size a batch of ``size`` rows runs at (the next allowed size)."""
        for allowed in self.allowed_batch_sizes:
            if allowed >= size:
                return allowed
        return size


def parse_batching_parameters(
    text: str, *, defaults: BatchingParameters | None = None, source: str = "<text>"
) -> BatchingParameters:
    """Parses TF Serving's batching parameters text format (``max_batch_size { value: 32 }``).

    Unset fields keep ``defaults`` (TF's defaults when None).  Raises
    InvalidArgumentError naming ``source`` for text that does not parse
    or values that do not fit together.
    """
    # Imported here: `import servinglib` must not load protobuf.

    from servinglib.protos import session_bundle_config_pb2 as pb
    from servinglib.protos.text_files import parse_text

    message = parse_text(text, pb.BatchingParameters(), "batching parameters", source)
    base = defaults if defaults is not None else BatchingParameters()
    changes: dict[str, Any] = {}
    for field in ("max_batch_size", "max_enqueued_batches", "num_batch_threads"):
        if message.HasField(field):
            changes[field] = getattr(message, field).value
    if message.HasField("batch_timeout_micros"):
        changes["batch_timeout_s"] = message.batch_timeout_micros.value / 1e6
    if message.HasField("thread_pool_name"):
        changes["thread_pool_name"] = message.thread_pool_name.value
    if message.allowed_batch_sizes:
        changes["allowed_batch_sizes"] = tuple(message.allowed_batch_sizes)
    if message.pad_variable_length_inputs:
        changes["pad_variable_length_inputs"] = True
    if message.HasField("enable_large_batch_splitting"):
        changes["enable_large_batch_splitting"] = message.enable_large_batch_splitting.value
    if message.HasField("max_execution_batch_size"):
        changes["max_execution_batch_size"] = message.max_execution_batch_size.value
    try:
        return attrs.evolve(base, **changes)
    except (ValueError, TypeError, InvalidArgumentError) as error:
        raise InvalidArgumentError(f"Invalid batching parameters in {source}: {error}") from None


def read_batching_parameters(
    path: str | os.PathLike[str], *, defaults: BatchingParameters | None = None
) -> BatchingParameters:
    """Reads a batching parameters file (``--batching_parameters_file``, ``batching_params.pbtxt``).

    Raises as :func:`~servinglib.protos.text_files.read_text_file` if the
    file cannot be read (NOT_FOUND when missing), InvalidArgumentError if it
    does not parse.
    """
    from servinglib.protos.text_files import read_text_file

    text = read_text_file(path, "batching parameters")
    return parse_batching_parameters(text, defaults=defaults, source=os.fspath(path))
