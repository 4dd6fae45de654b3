"""--platform_config_file: TF Serving's PlatformConfigMap text, with each platform's own message."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from servinglib.errors import InvalidArgumentError, NotFoundError
from servinglib.loaders.python import PythonPlatformConfig
from servinglib.loaders.registry import Platform, PlatformRegistry
from servinglib.loaders.tensorflow.config import TensorFlowPlatformConfig
from servinglib.server.cli.platform_config_file import (
    parse_platform_config_file,
    read_platform_config_file,
)

BUILTIN = """
platform_configs {
  key: "python"
  value {
    source_adapter_config {
      [type.googleapis.com/servinglib.tfs.PythonPlatformOptions] {
        allow_code_execution: true
        class_name: "Ranker"
      }
    }
  }
}
platform_configs {
  key: "tensorflow"
  value {
    source_adapter_config {
      [type.googleapis.com/servinglib.tfs.TensorFlowPlatformOptions] {
        saved_model_tags: "serve"
        saved_model_tags: "gpu"
        intra_op_parallelism_threads: 2
      }
    }
  }
}
"""


def test_builtin_platforms_read_their_options() -> None:
    """The python and tensorflow entries become their platforms' config objects."""
    configs = parse_platform_config_file(BUILTIN)
    assert configs["python"] == PythonPlatformConfig(
        allow_code_execution=True, entry_point="model.py", class_name="Ranker"
    )
    assert configs["tensorflow"] == TensorFlowPlatformConfig(("serve", "gpu"), 2, 0)


def test_a_registered_platform_gets_its_own_message() -> None:
    """A platform registered with a config message receives what its converter makes of it."""

    def convert(message: Any) -> dict[str, object]:
        return {"enabled": message.enable, "path": message.path}

    registry = PlatformRegistry(
        [
            Platform(
                "mine",
                "servinglib.loaders.python:make_adapter",
                config_message="servinglib.protos.monitoring_config_pb2:PrometheusConfig",
                config_from_message=convert,
            )
        ]
    )
    text = """
    platform_configs { key: "mine" value { source_adapter_config {
      [type.googleapis.com/servinglib.tfs.PrometheusConfig] { enable: true path: "/x" }
    } } }
    """
    assert parse_platform_config_file(text, registry=registry) == {
        "mine": {"enabled": True, "path": "/x"}
    }


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            'platform_configs { key: "tensorflow" value { source_adapter_config { '
            "[type.googleapis.com/tensorflow.serving.SavedModelBundleSourceAdapterConfig] {} } } }",
            "SavedModelBundleSourceAdapterConfig",
        ),
        (
            'platform_configs { key: "python" value { source_adapter_config { '
            "[type.googleapis.com/servinglib.tfs.TensorFlowPlatformOptions] {} } } }",
            "takes a servinglib.tfs.PythonPlatformOptions",
        ),
        (
            'platform_configs { key: "nope" value { source_adapter_config { '
            "[type.googleapis.com/servinglib.tfs.PythonPlatformOptions] {} } } }",
            "'nope' is not supported",
        ),
        ("platform_configs { key: 1 }", "platform.config"),
    ],
)
def test_what_cannot_be_used_is_invalid(text: str, message: str) -> None:
    """TF Serving's C++ adapter configs, wrong messages and unknown platforms are clear errors."""
    with pytest.raises(InvalidArgumentError, match=message):
        parse_platform_config_file(text, source="platform.config")


def test_reads_files(tmp_path: Path) -> None:
    """read_platform_config_file reads a file; a missing one is NOT_FOUND."""
    path = tmp_path / "platform.config"
    path.write_text(BUILTIN)
    assert set(read_platform_config_file(path)) == {"python", "tensorflow"}
    with pytest.raises(NotFoundError):
        read_platform_config_file(tmp_path / "missing")
