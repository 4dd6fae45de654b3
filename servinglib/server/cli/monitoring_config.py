"""TF Serving's ``--monitoring_config_file``: whether to export Prometheus metrics, and where."""

from __future__ import annotations

import os
from pathlib import Path
from typing import final

import attrs
from google.protobuf import text_format

from servinglib.errors import InvalidArgumentError, NotFoundError
from servinglib.protos import monitoring_config_pb2
from servinglib.server.plane.metrics import DEFAULT_METRICS_PATH


@final
@attrs.frozen
class PrometheusConfig:
    """Whether to export Prometheus metrics, and at which REST path.  Immutable."""

    enable: bool = False
    path: str = DEFAULT_METRICS_PATH


def parse_monitoring_config(text: str, *, source: str = "<text>") -> PrometheusConfig:
    """Parses TF Serving's ``--monitoring_config_file`` text format.

    ``prometheus_config { enable: true, path: "/metrics" }``; an empty
    path means the default.  Raises InvalidArgumentError naming ``source``
    for text that does not parse or a path not starting with ``/``.
    """
    message = monitoring_config_pb2.MonitoringConfig()
    try:
        text_format.Parse(text, message)
    except text_format.ParseError as error:
        raise InvalidArgumentError(f"Invalid monitoring config in {source}: {error}") from None
    prometheus = message.prometheus_config
    path = prometheus.path or DEFAULT_METRICS_PATH
    if not path.startswith("/"):
        raise InvalidArgumentError(
            f"Invalid monitoring config in {source}: the Prometheus path must start with '/', "
            f"got {path!r}"
        )
    return PrometheusConfig(prometheus.enable, path)


def read_monitoring_config(path: str | os.PathLike[str]) -> PrometheusConfig:
    """Reads a ``--monitoring_config_file`` (unreadable: NOT_FOUND); see parse_monitoring_config."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise NotFoundError(f"Cannot read the monitoring config file {path}: {error}") from None
    return parse_monitoring_config(text, source=os.fspath(path))
