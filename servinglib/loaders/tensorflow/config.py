"""TensorFlowPlatformConfig: how the "tensorflow" platform loads SavedModels (no TF import)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, final

import attrs

from servinglib.loaders.warmup import WarmupOptions


def _tags(value: Iterable[str]) -> tuple[str, ...]:
    return tuple(value)


@final
@attrs.frozen
class TensorFlowPlatformConfig:
    """Options of the "tensorflow" platform.

    ``saved_model_tags``: the MetaGraph to load (default ``serve``).
    ``intra_op_parallelism_threads`` / ``inter_op_parallelism_threads``:
    TensorFlow's process-wide thread pools (0: TF's default).
    ``model_process``: load and serve each version in a process of its own
    (:class:`~servinglib.loaders.process.ProcessLoader`).
    Immutable, so thread-safe.
    """

    saved_model_tags: tuple[str, ...] = attrs.field(default=("serve",), converter=_tags)
    intra_op_parallelism_threads: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    inter_op_parallelism_threads: int = attrs.field(default=0, validator=attrs.validators.ge(0))
    warmup: WarmupOptions = attrs.field(factory=WarmupOptions)
    model_process: bool = False


def config_from_message(message: Any) -> TensorFlowPlatformConfig:  # noqa: ANN401 - a TensorFlowPlatformOptions
    """The config a ``--platform_config_file`` entry (``TensorFlowPlatformOptions``) describes."""
    return TensorFlowPlatformConfig(
        tuple(message.saved_model_tags) or ("serve",),
        message.intra_op_parallelism_threads,
        message.inter_op_parallelism_threads,
        model_process=message.model_process,
    )
