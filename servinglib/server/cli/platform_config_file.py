"""TF Serving's ``--platform_config_file``: per-platform options as a text PlatformConfigMap.

Each entry maps a platform name to a ``source_adapter_config`` (a
``google.protobuf.Any``) holding that platform's config message: for the
built-in platforms ``servinglib.tfs.PythonPlatformOptions`` and
``servinglib.tfs.TensorFlowPlatformOptions``; a registered platform names
its own (``register_platform(..., config_message=...)``)::

    platform_configs {
      key: "python"
      value {
        source_adapter_config {
          [type.googleapis.com/servinglib.tfs.PythonPlatformOptions] {
            allow_code_execution: true
          }
        }
      }
    }
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from servinglib.errors import InvalidArgumentError, NotFoundError, ServingError
from servinglib.loaders.registry import PlatformRegistry, default_registry


def parse_platform_config_file(
    text: str, *, registry: PlatformRegistry | None = None, source: str = "<text>"
) -> dict[str, Any]:
    """Platform name → that platform's config object, from the text of a PlatformConfigMap.

    Raises InvalidArgumentError naming ``source`` and the platform for text
    that does not parse, unknown platforms or config messages, and configs
    their platform rejects.
    """
    from google.protobuf import text_format

    from servinglib.protos import platform_config_pb2

    registry = registry if registry is not None else default_registry
    registry.import_config_messages()  # text format finds an Any's type by its full name
    message = platform_config_pb2.PlatformConfigMap()
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as error:
        raise InvalidArgumentError(
            f"Invalid platform config in {source}: {error} (servinglib's platforms take "
            "servinglib.tfs.PythonPlatformOptions and servinglib.tfs.TensorFlowPlatformOptions)"
        ) from None
    configs: dict[str, Any] = {}
    for name, entry in sorted(message.platform_configs.items()):
        try:
            configs[name] = registry.config_from_any(name, entry.source_adapter_config)
        except ServingError as error:
            raise InvalidArgumentError(
                f"Invalid platform config in {source}: {error.message}"
            ) from None
        except (TypeError, ValueError) as error:
            raise InvalidArgumentError(
                f"Invalid platform config in {source} for platform '{name}': {error}"
            ) from None
    return configs


def read_platform_config_file(
    path: str | os.PathLike[str], *, registry: PlatformRegistry | None = None
) -> dict[str, Any]:
    """Reads a ``--platform_config_file`` (unreadable: NOT_FOUND); as parse_platform_config_file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise NotFoundError(f"Cannot read the platform config file {path}: {error}") from None
    return parse_platform_config_file(text, registry=registry, source=os.fspath(path))
