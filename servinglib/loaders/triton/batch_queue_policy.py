"""A Triton Python model's ``dynamic_batching`` as options: batch sizes, delay, priority levels
and each level's queue policy (timeout, what a timeout does, the queue's bound).

As Triton's dynamic batcher (``model_config.proto``, the batcher guide): requests are taken in
priority order, level 1 first, and in arrival order within a level; a request's ``priority``
of 0, or past ``priority_levels``, is the default level.  A level's policy is its entry in
``priority_queue_policy``, else ``default_queue_policy``.  A request waiting longer than its
timeout (the policy's ``default_timeout_microseconds``; a request's own ``timeout`` when the
policy allows an override and it is shorter) is rejected (``REJECT``: UNAVAILABLE, "Request
timeout expired") or goes behind the level's requests still in time (``DELAY``).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import final

import attrs

from servinglib.batching.options import DEFAULT_MAX_ENQUEUED_BATCHES
from servinglib.errors import InvalidArgumentError
from servinglib.loaders.triton.config import TritonModelConfig
from servinglib.protos import model_config_pb2 as pb


@final
@attrs.frozen
class QueuePolicy:
    """One priority level's queue policy.  Immutable, so thread-safe.

    ``timeout_s``: how long a request may wait (0: no bound); ``delay``: a request past it
    goes behind the level's others (Triton's DELAY) instead of failing (REJECT);
    ``allow_timeout_override``: a request's own shorter timeout wins; ``max_queue_size``: the
    requests the level holds at most (0: the batcher's bound).
    """

    timeout_s: float = 0.0
    delay: bool = False
    allow_timeout_override: bool = False
    max_queue_size: int = 0

    def timeout_of(self, requested_us: int) -> float:
        """The timeout of a request asking for ``requested_us`` (0: none asked), in seconds
        (0: none).  As Triton, a request may only shorten a timeout the policy sets."""
        if self.allow_timeout_override and 0 < requested_us / 1e6 < self.timeout_s:
            return requested_us / 1e6
        return self.timeout_s

    @classmethod
    def of(cls, message: pb.ModelQueuePolicy) -> QueuePolicy:
        return cls(
            timeout_s=message.default_timeout_microseconds / 1e6,
            delay=message.timeout_action == pb.ModelQueuePolicy.DELAY,
            allow_timeout_override=message.allow_timeout_override,
            max_queue_size=message.max_queue_size,
        )


def _policies(value: Mapping[int, QueuePolicy]) -> Mapping[int, QueuePolicy]:
    return MappingProxyType(dict(value))


@final
@attrs.frozen
class DynamicBatching:
    """A model's dynamic batching (see the module).  Immutable, so thread-safe.

    ``max_batch_size``: rows an ``execute`` gets at most; ``max_queue_delay_s``: how long the
    oldest request of a batch that is neither full nor of a preferred size waits for more;
    ``priority_levels`` (0: one level) and ``default_priority_level``; ``level_policies``:
    the levels with a policy of their own; ``max_queued``: the requests the levels without a
    ``max_queue_size`` of their own hold at most, all together (0: no bound; Triton's is
    unbounded; a server's memory is not).
    """

    max_batch_size: int = attrs.field(validator=attrs.validators.ge(1))
    max_queue_delay_s: float = 0.0
    preferred_batch_sizes: frozenset[int] = frozenset()
    priority_levels: int = 0
    default_priority_level: int = 0
    default_policy: QueuePolicy = QueuePolicy()
    level_policies: Mapping[int, QueuePolicy] = attrs.field(
        factory=lambda: MappingProxyType({}), converter=_policies
    )
    max_queued: int = 0

    def level_of(self, priority: int) -> int:
        """The level a request of ``priority`` waits at (0 with no priority levels)."""
        if not self.priority_levels:
            return 0
        if priority <= 0 or priority > self.priority_levels:
            return self.default_priority_level
        return priority

    def policy_of(self, level: int) -> QueuePolicy:
        return self.level_policies.get(level, self.default_policy)

    @property
    def has_timeouts(self) -> bool:
        """Whether any level's requests can time out."""
        policies = [self.default_policy, *self.level_policies.values()]
        return any(p.timeout_s > 0 for p in policies)


def dynamic_batching(config: TritonModelConfig) -> DynamicBatching | None:
    """The config's ``dynamic_batching``; None when unset or with ``max_batch_size`` 0 (Triton
    then runs each request alone).

    Raises InvalidArgumentError, as Triton refuses the load, for a ``default_priority_level``
    outside 1..``priority_levels`` or a ``priority_queue_policy`` level outside it.
    """
    message = config.message
    if not message.HasField("dynamic_batching") or message.max_batch_size < 1:
        return None
    dynamic = message.dynamic_batching
    where = f"model {message.name!r} in {config.source or '<text>'}"
    levels = dynamic.priority_levels
    if levels and not 1 <= dynamic.default_priority_level <= levels:
        raise InvalidArgumentError(
            f"dynamic_batching.default_priority_level must be in 1..{levels} "
            f"(priority_levels), got {dynamic.default_priority_level}: {where}"
        )
    for level in dynamic.priority_queue_policy:
        if not 1 <= level <= levels:
            raise InvalidArgumentError(
                f"dynamic_batching.priority_queue_policy has level {level}, outside 1..{levels} "
                f"(priority_levels): {where}"
            )
    return DynamicBatching(
        max_batch_size=message.max_batch_size,
        max_queue_delay_s=dynamic.max_queue_delay_microseconds / 1e6,
        preferred_batch_sizes=frozenset(s for s in dynamic.preferred_batch_size if s > 0),
        priority_levels=levels,
        default_priority_level=dynamic.default_priority_level if levels else 0,
        default_policy=QueuePolicy.of(dynamic.default_queue_policy),
        level_policies={
            level: QueuePolicy.of(policy) for level, policy in dynamic.priority_queue_policy.items()
        },
        max_queued=DEFAULT_MAX_ENQUEUED_BATCHES * message.max_batch_size,
    )
