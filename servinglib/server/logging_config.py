"""LoggingConfig: TF Serving's per-model request logging settings (``logging_config``)."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, final

import attrs

from servinglib.errors import InvalidArgumentError

if TYPE_CHECKING:
    from servinglib.protos import logging_config_pb2

FILE_COLLECTOR = "file"
"""The built-in log collector: TFRecord files of PredictionLog (an empty ``type`` means it too)."""


def _check_rate(_instance: object, _attribute: object, rate: float) -> None:
    if not isinstance(rate, (int, float)) or not (0.0 <= rate <= 1.0) or math.isnan(rate):
        raise InvalidArgumentError(f"sampling_rate must be in [0, 1], got {rate!r}")


@final
@attrs.frozen(kw_only=True)
class LoggingConfig:
    """Which of a model's requests are logged, and where (TF Serving's ``LoggingConfig``).

    ``sampling_rate``: the probability, in [0, 1], that a request is logged
    (0, the default, logs nothing).  ``collector_type``: the log collector
    (sink) the records go to: ``"file"`` (also ``""``) writes TFRecord files
    named after ``filename_prefix``; other types name sinks registered with
    the server (:class:`servinglib.server.observe.request_logger.RequestLogger`).
    Raises InvalidArgumentError for a rate outside [0, 1], and for the file
    collector without ``filename_prefix``.
    Immutable, so thread-safe.
    """

    sampling_rate: float = attrs.field(default=0.0, validator=_check_rate)
    collector_type: str = FILE_COLLECTOR
    filename_prefix: str = ""

    def __attrs_post_init__(self) -> None:
        if self.collector_type in ("", FILE_COLLECTOR) and not self.filename_prefix:
            raise InvalidArgumentError(
                "logging_config: the file log collector needs log_collector_config.filename_prefix"
            )

    @property
    def is_file(self) -> bool:
        """True when the records go to the built-in TFRecord file sink."""
        return self.collector_type in ("", FILE_COLLECTOR)

    @classmethod
    def from_proto(cls, message: logging_config_pb2.LoggingConfig) -> LoggingConfig:
        """Our ``LoggingConfig`` message (or one wire-identical) as a LoggingConfig."""
        collector = message.log_collector_config
        return cls(
            sampling_rate=message.sampling_config.sampling_rate,
            collector_type=collector.type,
            filename_prefix=collector.filename_prefix,
        )

    def fill_proto(self, message: logging_config_pb2.LoggingConfig) -> None:
        """Writes this config into ``message`` (a ``LoggingConfig``)."""
        message.log_collector_config.type = self.collector_type
        message.log_collector_config.filename_prefix = self.filename_prefix
        message.sampling_config.sampling_rate = self.sampling_rate
