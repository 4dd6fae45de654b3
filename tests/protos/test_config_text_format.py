"""Tests that model config files in TF Serving's text format parse alike into ours and TF Serving's.

Text format names no proto package, so a ``models.config`` written for TF Serving is parsed with
servinglib's own messages (DESIGN §6); these tests pin that both parsers agree on every field.
The official modules (tensorflow_serving.config) import without TensorFlow.
"""

from __future__ import annotations

import pytest
from google.protobuf import message as pb_message
from google.protobuf import text_format
from tensorflow_serving.config import file_system_storage_path_source_pb2 as tfs_fs_source_pb2
from tensorflow_serving.config import logging_config_pb2 as tfs_logging_config_pb2
from tensorflow_serving.config import model_server_config_pb2 as tfs_model_server_config_pb2
from tensorflow_serving.config import platform_config_pb2 as tfs_platform_config_pb2

from servinglib.protos import (
    file_system_storage_path_source_pb2,
    logging_config_pb2,
    model_server_config_pb2,
    platform_config_pb2,
)

# Every field of ModelServerConfig and what it holds, in the spellings TF Serving's files use:
# single and double quotes, optional colons before messages, separators, comments, an enum by name
# and by number, and an Any written as type_url and value.
EVERY_FIELD = """
# A model server config exercising every field.
model_config_list: {
  config: {
    name: 'latest'
    base_path: "/models/latest"
    model_platform: "tensorflow";
    model_version_policy { latest { num_versions: 3 } }
    logging_config {
      log_collector_config { type: "file" filename_prefix: "/tmp/requests" }
      sampling_config {
        sampling_rate: 0.125
        attributes: 3
        per_task_sampling_configs { dc: "eu" task_index: 0 sampling_rate: 1.0 }
        per_task_sampling_configs { dc: "us" sampling_rate: 0.5 }
      }
      custom_logging_config { type_url: "type.googleapis.com/x.Y" value: "\\001\\002" }
    }
  },
  config {
    name: "all"
    base_path: "relative/all"
    model_platform: "python"
    model_version_policy: { all: {} }
  }
  config {
    name: "specific"
    base_path: "gs://bucket/specific"
    model_type: TENSORFLOW
    model_version_policy { specific { versions: 42 versions: 43 versions: 9223372036854775807 } }
    version_labels { key: "stable" value: 42 }
    version_labels { key: "canary" value: 43 }
  }
  config { name: "legacy-number" base_path: "/m" model_type: 1 }
}
"""

CUSTOM = """
custom_model_config { type_url: "type.googleapis.com/my.Config" value: "abc" }
"""

SOURCE_CONFIG = """
servables {
  servable_name: "m"
  base_path: "/models/m"
  servable_version_policy { specific { versions: 1 } }
}
file_system_poll_wait_seconds: 30
fail_if_zero_versions_at_startup: true
servable_versions_always_present: true
"""

PLATFORM_CONFIG_MAP = """
platform_configs {
  key: "tensorflow"
  value { source_adapter_config { type_url: "type.googleapis.com/x.Adapter" value: "" } }
}
platform_configs { key: "python" value {} }
"""

LOGGING_CONFIG = """
log_collector_config { type: "" filename_prefix: "/tmp/logs" }
sampling_config { sampling_rate: 0.01 }
"""

# (text, our class, TF Serving's class)
TEXTS: dict[str, tuple[str, type[pb_message.Message], type[pb_message.Message]]] = {
    "ModelServerConfig-every-field": (
        EVERY_FIELD,
        model_server_config_pb2.ModelServerConfig,
        tfs_model_server_config_pb2.ModelServerConfig,
    ),
    "ModelServerConfig-custom": (
        CUSTOM,
        model_server_config_pb2.ModelServerConfig,
        tfs_model_server_config_pb2.ModelServerConfig,
    ),
    "FileSystemStoragePathSourceConfig": (
        SOURCE_CONFIG,
        file_system_storage_path_source_pb2.FileSystemStoragePathSourceConfig,
        tfs_fs_source_pb2.FileSystemStoragePathSourceConfig,
    ),
    "PlatformConfigMap": (
        PLATFORM_CONFIG_MAP,
        platform_config_pb2.PlatformConfigMap,
        tfs_platform_config_pb2.PlatformConfigMap,
    ),
    "LoggingConfig": (
        LOGGING_CONFIG,
        logging_config_pb2.LoggingConfig,
        tfs_logging_config_pb2.LoggingConfig,
    ),
}


def wire(message: pb_message.Message) -> bytes:
    return message.SerializeToString(deterministic=True)


@pytest.mark.parametrize("case", TEXTS)
def test_same_text_parses_into_ours_and_official_with_identical_bytes(case: str) -> None:
    """One text, parsed by our class and by TF Serving's, gives the same bytes."""
    text, ours_class, official_class = TEXTS[case]

    ours = text_format.Parse(text, ours_class())
    official = text_format.Parse(text, official_class())

    assert wire(ours) == wire(official)
    assert wire(ours) != b""


@pytest.mark.parametrize("case", TEXTS)
def test_our_text_output_is_tf_servings(case: str) -> None:
    """Our message printed in text format prints exactly as TF Serving's does."""
    text, ours_class, official_class = TEXTS[case]

    ours = text_format.Parse(text, ours_class())
    official = text_format.Parse(text, official_class())

    assert text_format.MessageToString(ours) == text_format.MessageToString(official)


def test_every_field_text_sets_what_it_says() -> None:
    """The every-field text lands in the fields it names (the comparison above is not vacuous)."""
    ours = text_format.Parse(EVERY_FIELD, model_server_config_pb2.ModelServerConfig())

    latest, every, specific, legacy = ours.model_config_list.config
    assert latest.model_version_policy.latest.num_versions == 3
    assert latest.logging_config.sampling_config.per_task_sampling_configs[0].HasField("task_index")
    assert not latest.logging_config.sampling_config.per_task_sampling_configs[1].HasField(
        "task_index"
    )
    assert every.model_version_policy.WhichOneof("policy_choice") == "all"
    assert list(specific.model_version_policy.specific.versions) == [42, 43, 2**63 - 1]
    assert dict(specific.version_labels) == {"stable": 42, "canary": 43}
    assert specific.model_type == legacy.model_type == model_server_config_pb2.TENSORFLOW


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("model_config_list { config { nmae: 'a' } }", 'has no field named "nmae"'),
        ("model_config_list { config { name: 'a' name: 'b' } }", 'multiple "name" fields'),
        ("model_config_list { config { model_type: PYTORCH } }", "has no value named PYTORCH"),
        ("model_config_list { config { name: 'a", "missing ending quote"),
    ],
)
def test_both_parsers_reject_the_same_mistakes(text: str, error: str) -> None:
    """Unknown fields, repeated singular fields, unknown enum names and cut strings fail in both."""
    for message_class in (
        model_server_config_pb2.ModelServerConfig,
        tfs_model_server_config_pb2.ModelServerConfig,
    ):
        with pytest.raises(text_format.ParseError, match=error):
            text_format.Parse(text, message_class())
