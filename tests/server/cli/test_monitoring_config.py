"""TF Serving's --monitoring_config_file: parsed into a PrometheusConfig, or a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from servinglib.errors import InvalidArgumentError, NotFoundError
from servinglib.server.cli.monitoring_config import (
    PrometheusConfig,
    parse_monitoring_config,
    read_monitoring_config,
)
from servinglib.server.observe.metrics import DEFAULT_METRICS_PATH


def test_monitoring_config_file(tmp_path: Path) -> None:
    """TF Serving's --monitoring_config_file parses; an empty path is the default one."""
    assert parse_monitoring_config("prometheus_config { enable: true }") == PrometheusConfig(
        True, DEFAULT_METRICS_PATH
    )
    path = tmp_path / "monitoring.config"
    path.write_text('prometheus_config { enable: true, path: "/metrics/custom" }')
    assert read_monitoring_config(path) == PrometheusConfig(True, "/metrics/custom")
    assert parse_monitoring_config("") == PrometheusConfig(False, DEFAULT_METRICS_PATH)


def test_bad_monitoring_configs_are_clear_errors(tmp_path: Path) -> None:
    """Unparsable text, a relative path and a missing file say what is wrong."""
    with pytest.raises(InvalidArgumentError, match=r"m\.config"):
        parse_monitoring_config("prometheus_config { enabel: true }", source="m.config")
    with pytest.raises(InvalidArgumentError, match="must start with '/'"):
        parse_monitoring_config('prometheus_config { enable: true, path: "metrics" }')
    with pytest.raises(NotFoundError):
        read_monitoring_config(tmp_path / "missing.config")
