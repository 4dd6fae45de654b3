"""TF Serving's ``--monitoring_config_file``: whether to export Prometheus metrics, and where."""

from __future__ import annotations

import os
from typing import final

import attrs

from servinglib.errors import InvalidArgumentError
from servinglib.protos import monitoring_config_pb2
from servinglib.protos.text_files import parse_text, read_text_file
from servinglib.server.observe.metrics import DEFAULT_METRICS_PATH


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
    message = parse_text(
        text, monitoring_config_pb2.MonitoringConfig(), "monitoring config", source
    )
    prometheus = message.prometheus_config
    path = prometheus.path or DEFAULT_METRICS_PATH
    if not path.startswith("/"):
        raise InvalidArgumentError(
            f"Invalid monitoring config in {source}: the Prometheus path must start with '/', "
            f"got {path!r}"
        )
    return PrometheusConfig(prometheus.enable, path)


def read_monitoring_config(path: str | os.PathLike[str]) -> PrometheusConfig:
    """Reads a ``--monitoring_config_file``: errors as ``read_text_file``, then as parsing."""
    text = read_text_file(path, "monitoring config")
    return parse_monitoring_config(text, source=os.fspath(path))
