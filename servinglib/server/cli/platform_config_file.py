"""TF Serving's ``--platform_config_file``: per-platform options as a text PlatformConfigMap."""

from __future__ import annotations

import os
from typing import Any

from servinglib.errors import InvalidArgumentError, ServingError
from servinglib.loaders.registry import PlatformRegistry, default_registry


def parse_platform_config_file(
    text: str, *, registry: PlatformRegistry | None = None, source: str = "<text>"
) -> dict[str, Any]:
    """Platform name → that platform's config object, from the text of a PlatformConfigMap.

    Raises InvalidArgumentError naming ``source`` and the platform for text
    that does not parse, unknown platforms or config messages, and configs
    their platform rejects.
    """

    from servinglib.protos import platform_config_pb2
    from servinglib.protos.text_files import parse_text

    registry = registry if registry is not None else default_registry
    registry.import_config_messages()  # text format finds an Any's type by its full name
    try:
        message = parse_text(
            text, platform_config_pb2.PlatformConfigMap(), "platform config", source
        )
    except InvalidArgumentError as error:
        raise InvalidArgumentError(
            f"{error.message} (servinglib's platforms take servinglib.tfs.PythonPlatformOptions "
            "and servinglib.tfs.TensorFlowPlatformOptions)"
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
    """Reads a ``--platform_config_file``: errors as ``read_text_file``, then as parsing."""
    from servinglib.protos.text_files import read_text_file

    text = read_text_file(path, "platform config")
    return parse_platform_config_file(text, registry=registry, source=os.fspath(path))
