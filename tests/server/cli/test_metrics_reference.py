"""docs/reference/metrics.md documents every declared series and lists those a real scrape shows,
under TF Serving's names."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import ModuleType

import pytest

from servinglib.server.observe.exposition import exported_name
from servinglib.server.observe.series import SERIES

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "metrics_reference.py"
DOC = Path(__file__).resolve().parents[3] / "docs" / "reference" / "metrics.md"

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


def documented_metrics(doc: str) -> dict[str, tuple[str, tuple[str, ...]]]:
    """Each row of the reference's metric tables: name → (type, label names)."""
    rows = {}
    for line in doc.splitlines():
        if line.startswith("| `"):
            name, kind, labels = (cell.strip() for cell in line.split("|")[1:4])
            rows[name.strip("`")] = (kind.split(",")[0], tuple(re.findall(r"`(\w+)`", labels)))
    return rows


def test_the_reference_documents_every_declared_series() -> None:
    """Every series of the table the metrics are built from has its row, typed and labelled as
    declared, under its exported name; no row documents a series that is not declared."""
    declared = {exported_name(s.name, s.kind): (s.kind, s.labels) for s in SERIES}
    assert documented_metrics(DOC.read_text()) == declared


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


def test_a_scrape_shows_exactly_the_declared_families(
    scraped: tuple[ModuleType, list[str]],
) -> None:
    """A real scrape's families are the declared series, each typed as declared."""
    _, series = scraped
    types = {line for line in series if line.startswith("# TYPE ")}
    assert types == {f"# TYPE {exported_name(s.name, s.kind)} {s.kind}" for s in SERIES}


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
