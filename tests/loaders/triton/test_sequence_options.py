"""A Triton model's sequence_batching read as SequenceOptions, and what is not applied."""

from __future__ import annotations

import pytest

from servinglib.errors import InvalidArgumentError
from servinglib.loaders.triton.config import parse_model_config
from servinglib.loaders.triton.python_config import not_implemented
from servinglib.loaders.triton.sequence_options import SequenceOptions, Strategy, sequence_options
from tests.triton.sequence_models import accumulator_config


def _options(**config: object) -> SequenceOptions | None:
    return sequence_options(parse_model_config(accumulator_config("m", **config), "m"), 2)  # type: ignore[arg-type]


def test_direct_gives_each_instance_a_slot_per_batch_row_and_triton_s_idle_default() -> None:
    """Direct: max_batch_size slots per instance, 1 s idle by default, an unbounded backlog."""
    assert _options(max_batch_size=4) == SequenceOptions(
        Strategy.DIRECT, slots=4, max_batch_size=4, instances=2, max_sequence_idle_s=1.0
    )
    assert _options(max_batch_size=0).slots == 1  # type: ignore[union-attr]


def test_oldest_takes_its_candidates_delay_and_preferred_sizes() -> None:
    """Oldest: max_candidate_sequences slots, the delay in seconds, preferred sizes that fit."""
    strategy = (
        "oldest { max_candidate_sequences: 6 preferred_batch_size: [ 2, 9 ] "
        "max_queue_delay_microseconds: 1500 }"
    )
    options = _options(max_batch_size=4, strategy=strategy)

    assert options is not None
    assert (options.strategy, options.slots, options.max_queue_delay_s) == (
        Strategy.OLDEST,
        6,
        0.0015,
    )
    assert options.preferred_batch_sizes == (2,)


def test_a_backlog_bound_that_is_not_a_whole_number_is_invalid() -> None:
    """MAX_SEQUENCE_BACKLOG "-1" or "many" fails the load naming the parameter."""
    for text in ("-1", "many"):
        extra = f'parameters {{ key: "MAX_SEQUENCE_BACKLOG" value: {{ string_value: "{text}" }} }}'
        with pytest.raises(InvalidArgumentError, match="MAX_SEQUENCE_BACKLOG"):
            _options(model_extra=extra)
    assert _options(model_extra=extra.replace(text, "3")).max_backlog == 3  # type: ignore[union-attr]


def test_a_python_model_s_sequence_fields_are_applied_but_iterative_sequence() -> None:
    """Only the sequence_batching fields servinglib does not apply are named as unapplied."""
    text = accumulator_config(
        "m", extra="iterative_sequence: true max_sequence_idle_microseconds: 5"
    )

    assert not_implemented(parse_model_config(text, "m")) == [
        "sequence_batching.iterative_sequence"
    ]
