"""Tests of reading a Triton config.pbtxt and mapping it onto servinglib's objects.

The configs are Triton's documentation's examples (python_backend's add_sub, the model
configuration guide's, the ensemble and sequence batcher guides').
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import numpy as np
import pytest
from google.protobuf import json_format

from servinglib.batching.options import DEFAULT_MAX_ENQUEUED_BATCHES, BatchingParameters
from servinglib.errors import InvalidArgumentError, NotFoundError
from servinglib.loaders.triton.config import (
    TritonModelConfig,
    batching_parameters,
    instance_count,
    numpy_dtype,
    parse_model_config,
    read_model_config,
    tensor_specs,
    version_policy,
)
from servinglib.protos import model_config_pb2 as pb
from servinglib.servable import TensorSpec
from servinglib.sources.version_policy import ServableVersionPolicy
from tests.triton.oracle import ADD_SUB_MODEL_PY, running_triton, skip_without_triton

ADD_SUB = """
name: "add_sub"
backend: "python"

input [
  {
    name: "INPUT0"
    data_type: TYPE_FP32
    dims: [ 4 ]
  },
  {
    name: "INPUT1"
    data_type: TYPE_FP32
    dims: [ 4 ]
  }
]
output [
  {
    name: "OUTPUT0"
    data_type: TYPE_FP32
    dims: [ 4 ]
  },
  {
    name: "OUTPUT1"
    data_type: TYPE_FP32
    dims: [ 4 ]
  }
]

instance_group [{ kind: KIND_CPU }]
"""

MINIMAL_BATCHED = """
  platform: "tensorrt_plan"
  max_batch_size: 8
  input [
    {
      name: "input0"
      data_type: TYPE_FP32
      dims: [ 16 ]
    },
    {
      name: "input1"
      data_type: TYPE_FP32
      dims: [ 16 ]
    }
  ]
  output [
    {
      name: "output0"
      data_type: TYPE_FP32
      dims: [ 16 ]
    }
  ]
  version_policy: { all { }}
"""

DYNAMIC_BATCHING = """
backend: "python"
max_batch_size: 8
input [ { name: "x" data_type: TYPE_INT64 dims: [ -1, 3 ] } ]
output [ { name: "y" data_type: TYPE_STRING dims: [ 1 ] } ]
dynamic_batching {
  preferred_batch_size: [ 4, 8 ]
  max_queue_delay_microseconds: 100
  priority_levels: 2
  default_queue_policy {
    max_queue_size: 20
    timeout_action: DELAY
    default_timeout_microseconds: 5000
  }
}
instance_group [ { count: 2 kind: KIND_CPU } ]
"""

ENSEMBLE = """
name: "ensemble_model"
platform: "ensemble"
max_batch_size: 1
input [
  {
    name: "IMAGE"
    data_type: TYPE_STRING
    dims: [ 1 ]
  }
]
output [
  {
    name: "CLASSIFICATION"
    data_type: TYPE_FP32
    dims: [ 1000 ]
  },
  {
    name: "SEGMENTATION"
    data_type: TYPE_FP32
    dims: [ 3, 224, 224 ]
  }
]
ensemble_scheduling {
  step [
    {
      model_name: "image_preprocess_model"
      model_version: -1
      input_map {
        key: "RAW_IMAGE"
        value: "IMAGE"
      }
      output_map {
        key: "PREPROCESSED_OUTPUT"
        value: "preprocessed_image"
      }
    },
    {
      model_name: "classification_model"
      model_version: -1
      input_map {
        key: "FORMATTED_IMAGE"
        value: "preprocessed_image"
      }
      output_map {
        key: "CLASSIFICATION_OUTPUT"
        value: "CLASSIFICATION"
      }
    }
  ]
}
"""

SEQUENCE = """
name: "sequence_model"
backend: "python"
max_batch_size: 2
input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  direct { }
  control_input [
    {
      name: "START"
      control [
        {
          kind: CONTROL_SEQUENCE_START
          fp32_false_true: [ 0, 1 ]
        }
      ]
    },
    {
      name: "READY"
      control [
        {
          kind: CONTROL_SEQUENCE_READY
          fp32_false_true: [ 0, 1 ]
        }
      ]
    }
  ]
}
"""

TENSORS = (
    'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },'
    ' { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
    'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },'
    ' { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'
)


def parse(text: str, model_name: str = "m") -> TritonModelConfig:
    return parse_model_config(text, model_name, source=f"/repo/{model_name}/config.pbtxt")


def test_add_sub_maps_to_unbatched_float_specs() -> None:
    """python_backend's add_sub: [4] float32 specs, the latest version, one instance, no batcher."""
    config = parse(ADD_SUB, "add_sub")

    assert tensor_specs(config) == (
        (TensorSpec("INPUT0", "float32", [4]), TensorSpec("INPUT1", "float32", [4])),
        (TensorSpec("OUTPUT0", "float32", [4]), TensorSpec("OUTPUT1", "float32", [4])),
    )
    assert version_policy(config) == ServableVersionPolicy.latest(1)
    assert instance_count(config) == 1
    assert batching_parameters(config) is None
    assert config.unimplemented == ()


def test_max_batch_size_adds_a_leading_batch_dimension() -> None:
    """The guide's minimal batched config: dims [16] serve as [-1, 16]; version_policy all."""
    config = parse(MINIMAL_BATCHED)

    inputs, outputs = tensor_specs(config)
    assert [spec.shape for spec in inputs + outputs] == [(-1, 16)] * 3
    assert version_policy(config) == ServableVersionPolicy.all()
    assert batching_parameters(config) is None  # batched requests, but no dynamic batcher
    assert config.unimplemented == ()


def test_dynamic_batching_maps_delay_preferred_sizes_and_queue_size_and_names_the_rest() -> None:
    """The delay becomes batch_timeout_s, the preferred sizes ours, the queue bound whole
    batches; the rest is named."""
    config = parse(DYNAMIC_BATCHING)

    assert batching_parameters(config) == BatchingParameters(
        max_batch_size=8,
        batch_timeout_s=0.0001,
        max_enqueued_batches=3,
        preferred_batch_sizes=[4, 8],
    )
    assert tensor_specs(config) == (
        (TensorSpec("x", "int64", [-1, -1, 3]),),
        (TensorSpec("y", object, [-1, 1]),),
    )
    assert instance_count(config) == 2
    assert config.unimplemented == (
        "dynamic_batching.priority_levels",
        "dynamic_batching.default_queue_policy.timeout_action",
        "dynamic_batching.default_queue_policy.default_timeout_microseconds",
    )


def test_an_unbounded_triton_queue_keeps_our_default_bound() -> None:
    """Without max_queue_size (Triton: unbounded) the batcher keeps its default queue bound."""
    config = parse(f"max_batch_size: 4\n{TENSORS}dynamic_batching {{ }}")

    parameters = batching_parameters(config)
    assert parameters is not None
    assert (parameters.max_batch_size, parameters.batch_timeout_s) == (4, 0.0)
    assert parameters.max_enqueued_batches == DEFAULT_MAX_ENQUEUED_BATCHES


def test_dynamic_batching_without_max_batch_size_batches_nothing() -> None:
    """dynamic_batching with max_batch_size 0 gives no batching parameters (each request alone)."""
    assert batching_parameters(parse(f"{TENSORS}dynamic_batching {{ }}")) is None


def test_ensemble_parses_and_its_steps_are_implemented() -> None:
    """The ensemble guide's config parses; its steps are read, no instance is asked."""
    config = parse(ENSEMBLE, "ensemble_model")

    assert config.unimplemented == ()
    assert instance_count(config) == 0
    assert tensor_specs(config)[0] == (TensorSpec("IMAGE", object, [-1, 1]),)
    assert config.message.ensemble_scheduling.step[1].input_map == {
        "FORMATTED_IMAGE": "preprocessed_image"
    }


def test_sequence_batching_parses_and_is_named() -> None:
    """The sequence batcher guide's config parses, and sequence_batching is named once."""
    config = parse(SEQUENCE, "sequence_model")

    assert config.unimplemented == ("sequence_batching",)
    assert config.message.sequence_batching.control_input[1].control[0].kind == (
        pb.ModelSequenceBatching.Control.CONTROL_SEQUENCE_READY
    )


def test_every_unimplemented_field_is_named_once_by_its_path() -> None:
    """Set fields servinglib does not act on are listed as dotted paths, repeated ones once;
    those it applies (response_cache, parameters) are not."""
    text = (
        'input [ { name: "a" data_type: TYPE_FP32 dims: [ 1 ] reshape { shape: [ ] } },'
        ' { name: "b" data_type: TYPE_FP32 dims: [ 1 ] optional: true reshape { } } ]\n'
        'output [ { name: "c" data_type: TYPE_FP32 dims: [ 1 ] label_filename: "l.txt" } ]\n'
        'instance_group [ { kind: KIND_CPU host_policy: "p" rate_limiter { priority: 2 } } ]\n'
        "model_transaction_policy { decoupled: true }\n"
        "response_cache { enable: true }\n"
        'parameters { key: "k" value: { string_value: "v" } }\n'
        'model_warmup [ { name: "w" batch_size: 1 } ]\n'
    )

    assert parse(text).unimplemented == (
        "input.reshape",
        "input.optional",
        "output.label_filename",
        "instance_group.rate_limiter",
        "instance_group.host_policy",
        "model_warmup",
        "model_transaction_policy",
    )  # response_cache is applied (the plane's response caching): not named


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("{ latest: { num_versions: 2 } }", ServableVersionPolicy.latest(2)),
        ("{ all: { } }", ServableVersionPolicy.all()),
        ("{ specific: { versions: [ 1, 3 ] } }", ServableVersionPolicy.specific([1, 3])),
    ],
)
def test_version_policy_maps_each_choice(policy: str, expected: ServableVersionPolicy) -> None:
    """Each of Triton's version policies (the guide's examples) becomes ours."""
    assert version_policy(parse(f"version_policy: {policy}")) == expected


@pytest.mark.parametrize("policy", ["{ latest: { } }", "{ specific: { } }"])
def test_a_policy_of_no_version_is_refused(policy: str) -> None:
    """latest without num_versions, or specific without versions, is refused (Triton: no load)."""
    with pytest.raises(InvalidArgumentError, match="version"):
        version_policy(parse(f"version_policy: {policy}"))


@pytest.mark.parametrize(
    "groups", ["[ { kind: KIND_MODEL count: 3 } ]", "[ { kind: KIND_AUTO count: 2 }, { } ]"]
)
def test_model_and_auto_instance_kinds_are_accepted(groups: str) -> None:
    """KIND_MODEL and KIND_AUTO groups count their instances (count unset: one)."""
    assert instance_count(parse(f"instance_group {groups}")) == 3


@pytest.mark.parametrize(
    "groups", ["[ { count: 2 kind: KIND_GPU } ]", "[ { kind: KIND_AUTO gpus: [ 0 ] } ]"]
)
def test_gpu_instances_are_refused_in_one_line(groups: str) -> None:
    """A KIND_GPU group, or one naming GPU ids, is refused: no GPU is configured."""
    with pytest.raises(InvalidArgumentError) as refused:
        instance_count(parse(f"instance_group {groups}"))

    assert str(refused.value) == (
        "Model 'm': instance_group 'm_0' asks for a GPU in /repo/m/config.pbtxt, "
        "but no GPU is configured"
    )


@pytest.mark.parametrize(
    ("data_type", "dtype"),
    [
        ("TYPE_BOOL", np.bool_),
        ("TYPE_UINT8", np.uint8),
        ("TYPE_UINT16", np.uint16),
        ("TYPE_UINT32", np.uint32),
        ("TYPE_UINT64", np.uint64),
        ("TYPE_INT8", np.int8),
        ("TYPE_INT16", np.int16),
        ("TYPE_INT32", np.int32),
        ("TYPE_INT64", np.int64),
        ("TYPE_FP16", np.float16),
        ("TYPE_FP32", np.float32),
        ("TYPE_FP64", np.float64),
        ("TYPE_STRING", object),
        ("TYPE_BF16", "bfloat16"),
    ],
)
def test_each_data_type_has_its_numpy_dtype(data_type: str, dtype: object) -> None:
    """Every Triton data type maps to the numpy dtype of its KServe V2 twin."""
    if dtype == "bfloat16":
        dtype = pytest.importorskip("ml_dtypes").bfloat16

    assert numpy_dtype(pb.DataType.Value(data_type)) == np.dtype(dtype)


@pytest.mark.parametrize("data_type", [pb.TYPE_INVALID, 99])
def test_invalid_data_types_are_refused(data_type: int) -> None:
    """TYPE_INVALID (a tensor without data_type) and unknown numbers have no dtype."""
    with pytest.raises(InvalidArgumentError, match="has no numpy dtype"):
        numpy_dtype(data_type)


def test_malformed_text_names_the_file_and_line() -> None:
    """A value Triton's proto does not have is an error naming the file, line and column."""
    with pytest.raises(InvalidArgumentError) as refused:
        parse('backend: "python"\ninput [ { name: "x" data_type: TYPE_FP33 } ]')

    assert str(refused.value).startswith(
        "Invalid Triton model configuration in /repo/m/config.pbtxt: line 2, column 32: "
    )
    assert "TYPE_FP33" in str(refused.value)


def test_a_field_triton_does_not_have_is_an_error_in_triton_s_names() -> None:
    """A field name no Triton config has is refused, naming Triton's message, not our package."""
    with pytest.raises(InvalidArgumentError) as refused:
        parse("max_batch: 8")

    assert "ModelConfig" in str(refused.value)
    assert "servinglib" not in str(refused.value)


def test_a_name_other_than_the_directory_is_refused() -> None:
    """The config's name must be its directory's, as in Triton."""
    with pytest.raises(InvalidArgumentError, match=r"names the model 'other'.*directory is 'm'"):
        parse('name: "other"')


def test_completion_fills_what_triton_fills() -> None:
    """Name, latest version, model file and named CPU instances are filled as Triton shows them."""
    message = parse(
        f'backend: "python"\n{TENSORS}instance_group [ {{ }}, {{ name: "g" }} ]'
    ).message

    assert message.name == "m"
    assert message.version_policy.latest.num_versions == 1
    assert message.default_model_filename == "model.py"
    assert [(g.name, g.kind, g.count) for g in message.instance_group] == [
        ("m_0", pb.ModelInstanceGroup.KIND_CPU, 1),
        ("g", pb.ModelInstanceGroup.KIND_CPU, 1),
    ]


def test_read_model_config_reads_the_directory_s_config(tmp_path: Path) -> None:
    """read_model_config reads <model>/config.pbtxt, named after the directory."""
    (tmp_path / "add_sub").mkdir()
    (tmp_path / "add_sub" / "config.pbtxt").write_text(ADD_SUB, encoding="utf-8")

    config = read_model_config(tmp_path / "add_sub")

    assert config.message.name == "add_sub"
    assert config.source == str(tmp_path / "add_sub" / "config.pbtxt")


def test_a_missing_config_is_not_found(tmp_path: Path) -> None:
    """A model directory without config.pbtxt is a NotFoundError naming the file."""
    with pytest.raises(NotFoundError, match=r"config\.pbtxt"):
        read_model_config(tmp_path)


# Configs Triton loads with the Python backend (add_sub's model.py serves any of them).
DIFFERENTIAL = {
    "plain": f'backend: "python"\n{TENSORS}',
    "batched": (
        f'name: "batched"\nbackend: "python"\nmax_batch_size: 8\n{TENSORS}'
        "dynamic_batching { preferred_batch_size: [ 4, 8 ] max_queue_delay_microseconds: 100"
        " default_queue_policy { max_queue_size: 16 } }\n"
        "version_policy: { latest: { num_versions: 2 } }\n"
        'parameters { key: "k" value: { string_value: "v" } }\n'
    ),
    "groups": (
        f'backend: "python"\n{TENSORS}'
        'instance_group [ { kind: KIND_AUTO }, { count: 2 kind: KIND_MODEL name: "mine" } ]\n'
    ),
    "sequence": (
        f'backend: "python"\nmax_batch_size: 2\n{TENSORS}'
        "sequence_batching { max_sequence_idle_microseconds: 5000000 direct { } }\n"
    ),
    "ensemble": (
        f'platform: "ensemble"\nmax_batch_size: 8\n{TENSORS}'
        'ensemble_scheduling { step [ { model_name: "plain" model_version: -1'
        ' input_map { key: "INPUT0" value: "INPUT0" } input_map { key: "INPUT1" value: "INPUT1" }'
        ' output_map { key: "OUTPUT0" value: "OUTPUT0" }'
        ' output_map { key: "OUTPUT1" value: "OUTPUT1" } } ] }\n'
    ),
}


def test_our_completed_configs_are_triton_s(tmp_path: Path) -> None:
    """Triton's GET /v2/models/<m>/config equals our completed parse of the same config.pbtxt
    (but for Triton's optimization defaults, which servinglib has no counterpart of)."""
    skip_without_triton()
    repository = tmp_path / "repository"
    for name, text in DIFFERENTIAL.items():
        (repository / name / "1").mkdir(parents=True)
        (repository / name / "config.pbtxt").write_text(text, encoding="utf-8")
        if name != "ensemble":
            (repository / name / "1" / "model.py").write_text(ADD_SUB_MODEL_PY, encoding="utf-8")
    (tmp_path / "work").mkdir()

    with running_triton(repository, tmp_path / "work") as triton:
        answers = {
            name: httpx.get(f"http://{triton.http_url}/v2/models/{name}/config").json()
            for name in DIFFERENTIAL
        }

    for name, answer in answers.items():
        triton_s = json_format.Parse(json.dumps(answer), pb.ModelConfig())
        triton_s.ClearField("optimization")
        ours = read_model_config(repository / name).message
        assert json_format.MessageToDict(ours) == json_format.MessageToDict(triton_s), name
