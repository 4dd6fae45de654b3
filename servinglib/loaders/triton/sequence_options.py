"""A Triton model's ``sequence_batching``: how its sequences get slots and form batches.

:func:`sequence_options` maps the config onto :class:`SequenceOptions`, which the sequence
batcher (:mod:`servinglib.loaders.triton.sequence_batcher`) follows:

- ``direct`` (the default strategy): each instance has ``max_batch_size`` slots (one when
  it is 0), a sequence owns one for its lifetime; ``max_queue_delay_microseconds`` and
  ``minimum_slot_utilization`` say how long a batch waits for more slots to be ready;
- ``oldest``: each instance has ``max_candidate_sequences`` slots; a batch takes at most one
  request of each, oldest first, up to ``max_batch_size``, and runs at once at a
  ``preferred_batch_size`` or when its first request has waited ``max_queue_delay``;
- ``max_sequence_idle_microseconds`` (Triton's default: one second) ends an idle sequence;
- the model parameter ``MAX_SEQUENCE_BACKLOG`` (servinglib's; 0 or unset: unbounded, as
  Triton) bounds the sequences waiting for a slot; beyond it a new sequence is UNAVAILABLE.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import TYPE_CHECKING, final

import attrs

from servinglib.errors import InvalidArgumentError

if TYPE_CHECKING:  # only read: the config reader (and its protos) load with Triton models
    from servinglib.loaders.triton.config import TritonModelConfig

DEFAULT_MAX_SEQUENCE_IDLE_US = 1_000_000
"""Triton's ``max_sequence_idle_microseconds`` when it is not set (or 0)."""

BACKLOG_PARAMETER = "MAX_SEQUENCE_BACKLOG"
"""The config.pbtxt ``parameters`` key bounding a model's backlog of sequences."""


class Strategy(enum.Enum):
    """How a sequence model's requests form batches."""

    DIRECT = "direct"
    OLDEST = "oldest"


def _sizes(value: Iterable[int]) -> tuple[int, ...]:
    return tuple(sorted({int(v) for v in value}))


@final
@attrs.frozen
class SequenceOptions:
    """How the sequences of one model get slots and form batches (see the module).

    ``slots``: the sequences one instance serves at once; ``max_batch_size``: the requests
    one ``execute`` gets at most; ``instances``: how many instances, each with its slots;
    ``batch_dimension``: requests carry their rows in dimension 0 (Triton's
    ``max_batch_size`` > 0), each row counted as an inference (else a request is one).
    Immutable, so thread-safe.
    """

    strategy: Strategy = Strategy.DIRECT
    slots: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    max_batch_size: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    instances: int = attrs.field(default=1, validator=attrs.validators.ge(1))
    max_queue_delay_s: float = attrs.field(default=0.0, validator=attrs.validators.ge(0))
    minimum_slot_utilization: float = attrs.field(
        default=0.0, validator=[attrs.validators.ge(0), attrs.validators.le(1)]
    )
    preferred_batch_sizes: tuple[int, ...] = attrs.field(default=(), converter=_sizes)
    max_sequence_idle_s: float = attrs.field(
        default=DEFAULT_MAX_SEQUENCE_IDLE_US / 1e6, validator=attrs.validators.gt(0)
    )
    max_backlog: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    batch_dimension: bool = True


def sequence_options(config: TritonModelConfig, instances: int = 1) -> SequenceOptions | None:
    """``sequence_batching`` as SequenceOptions for ``instances`` instances; None when unset.

    Raises InvalidArgumentError for an ``oldest`` strategy without candidate sequences and
    for a ``MAX_SEQUENCE_BACKLOG`` that is not a whole number of 0 or more.
    """
    message = config.message
    if not message.HasField("sequence_batching"):
        return None
    sequences = message.sequence_batching
    batch = max(1, message.max_batch_size)
    idle_us = sequences.max_sequence_idle_microseconds or DEFAULT_MAX_SEQUENCE_IDLE_US
    idle_s = idle_us / 1e6
    backlog = _backlog(config)
    if sequences.WhichOneof("strategy_choice") == "oldest":
        oldest = sequences.oldest
        if oldest.max_candidate_sequences < 1:
            raise InvalidArgumentError(
                f"Model {message.name!r}: sequence_batching.oldest.max_candidate_sequences "
                f"must be 1 or more in {config.source or '<text>'}"
            )
        return SequenceOptions(
            Strategy.OLDEST,
            slots=oldest.max_candidate_sequences,
            max_queue_delay_s=oldest.max_queue_delay_microseconds / 1e6,
            preferred_batch_sizes=[s for s in oldest.preferred_batch_size if 0 < s <= batch],
            instances=instances,
            max_batch_size=batch,
            max_sequence_idle_s=idle_s,
            max_backlog=backlog,
            batch_dimension=message.max_batch_size > 0,
        )
    direct = sequences.direct
    return SequenceOptions(
        Strategy.DIRECT,
        slots=batch,
        max_queue_delay_s=direct.max_queue_delay_microseconds / 1e6,
        minimum_slot_utilization=min(1.0, max(0.0, direct.minimum_slot_utilization)),
        instances=instances,
        max_batch_size=batch,
        max_sequence_idle_s=idle_s,
        max_backlog=backlog,
        batch_dimension=message.max_batch_size > 0,
    )


def _backlog(config: TritonModelConfig) -> int:
    parameter = config.message.parameters.get(BACKLOG_PARAMETER)
    if parameter is None:
        return 0
    text = parameter.string_value.strip()
    if not text.isdigit():
        raise InvalidArgumentError(
            f"Model {config.message.name!r}: parameter {BACKLOG_PARAMETER} must be a whole "
            f"number of sequences (0: unbounded), not {text!r:.40} in {config.source or '<text>'}"
        )
    return int(text)
