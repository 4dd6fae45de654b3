"""model_config_json: a Triton model configuration as Triton's HTTP JSON."""

from __future__ import annotations

from servinglib.codecs.model_config_json import model_config_json
from servinglib.protos import model_config_pb2 as pb


def test_64_bit_integers_are_numbers_and_defaults_are_printed() -> None:
    """dims, versions and map values of int64 fields are JSON numbers; unset scalars appear."""
    config = pb.ModelConfig(name="m", max_batch_size=4)
    config.input.add(name="x", data_type=pb.TYPE_FP32, dims=[-1, 3])
    config.version_policy.specific.versions.extend([1, 2])
    config.dynamic_batching.max_queue_delay_microseconds = 100
    config.dynamic_batching.priority_queue_policy[1].max_queue_size = 8
    fields = model_config_json(config)
    assert fields["input"][0]["dims"] == [-1, 3]
    assert fields["input"][0]["data_type"] == "TYPE_FP32"
    assert fields["input"][0]["format"] == "FORMAT_NONE"
    assert fields["version_policy"] == {"specific": {"versions": [1, 2]}}
    assert fields["dynamic_batching"]["max_queue_delay_microseconds"] == 100
    assert fields["dynamic_batching"]["priority_queue_policy"]["1"]["max_queue_size"] == 8
    assert fields["platform"] == ""
