"""docs/reference/metrics.md lists the series a real scrape shows, under TF Serving's names."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "metrics_reference.py"

# TF Serving's metrics as its exporter names them (monitoring/prometheus_exporter.cc; the
# sources are listed in the shared reference facts, section 1i).
TF_SERVING_FAMILIES = {
    ":tensorflow:serving:request_count": "counter",
    ":tensorflow:serving:request_latency": "histogram",
    ":tensorflow:serving:request_log_count": "counter",
    ":tensorflow:serving:batching_session:queuing_latency": "histogram",
    ":tensorflow:serving:batching_session:wrapped_run_count": "counter",
    ":tensorflow:serving:batching_session:input_batch_size": "histogram",
    ":tensorflow:serving:batching_session:processed_batch_size": "histogram",
    ":tensorflow:serving:batching_session:padding_size": "histogram",
}


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("metrics_reference", SCRIPT)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def scraped() -> tuple[ModuleType, list[str]]:
    script = load_script()
    return script, script.series_of(script.scrape_a_server())


def test_the_reference_lists_every_series_of_a_real_scrape(
    scraped: tuple[ModuleType, list[str]],
) -> None:
    """The scrape's series equal the documented list (regenerate: scripts/metrics_reference.py)."""
    script, series = scraped
    documented = script.documented_series(script.DOC.read_text())
    assert series == documented


def test_tf_serving_families_keep_tf_serving_names_and_types(
    scraped: tuple[ModuleType, list[str]],
) -> None:
    """Every :tensorflow: family is TF Serving's, typed as TF Serving's; no _total or _created."""
    _, series = scraped
    types = {
        line.split(" ")[2]: line.split(" ")[3] for line in series if line.startswith("# TYPE ")
    }
    ours = {name: kind for name, kind in types.items() if name.startswith(":tensorflow:")}
    assert ours == TF_SERVING_FAMILIES
    assert not [s for s in series if s.startswith(":tensorflow:") and "_total" in s]
    assert not [s for s in series if "_created" in s]
    others = [name for name in types if not name.startswith(":tensorflow:")]
    assert all(name.startswith("servinglib_") for name in others), others
