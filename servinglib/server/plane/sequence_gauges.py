"""What the metrics show of sequence models: active sequences, backlog and slots, per model."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, final, runtime_checkable

import attrs

from servinglib.errors import ServingError
from servinglib.server.model_spec import ModelSpec
from servinglib.server.server_core import ServerCore


@final
@attrs.frozen
class SequenceGauge:
    """A sequence model's sequences now: ``active`` hold one of its ``slots`` (all its
    instances' together), ``backlog`` wait for one.  Immutable."""

    active: int
    backlog: int
    slots: int


@runtime_checkable
class _SequenceServable(Protocol):
    """A servable whose calls are placed by a sequence batcher (a Triton model with
    ``sequence_batching``)."""

    def sequence_gauge(self) -> tuple[int, int, int]: ...


def sequence_gauges(core: ServerCore) -> Mapping[str, SequenceGauge]:
    """Each sequence model's gauge, its available versions added up; other models left out.

    Reads each available version's servable through a handle taken and released at once.
    """
    gauges: dict[str, SequenceGauge] = {}
    for servable_id in sorted(core.monitor.get_available_servable_states()):
        try:
            handle = core.servable_handle(ModelSpec.specific(servable_id.name, servable_id.version))
        except ServingError:
            continue  # unloaded meanwhile
        try:
            servable = handle.servable
            if not isinstance(servable, _SequenceServable):
                continue
            active, backlog, slots = servable.sequence_gauge()
        finally:
            handle.release()
        seen = gauges.get(servable_id.name, SequenceGauge(0, 0, 0))
        gauges[servable_id.name] = SequenceGauge(
            seen.active + active, seen.backlog + backlog, seen.slots + slots
        )
    return gauges
