"""WorkerMetrics: the metrics of every worker process of one server, summed at scrape time."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, final

_SUMMED = frozenset({"counter", "histogram", "summary"})
_WORKER_LABEL = "worker"

# name → [type, help, {(sample name, ((label, value), ...)): value}]
_Families = dict[str, list[Any]]


@final
class WorkerMetrics:
    """Publishes one worker's registry to the shared directory; renders the sum of all workers.

    Thread-safe: :meth:`publish` and :meth:`render` may be called from any thread.
    """

    def __init__(
        self,
        registry: Any,  # noqa: ANN401 - a prometheus_client CollectorRegistry
        directory: str | os.PathLike[str],
        index: int,
        *,
        publish_period_s: float = 1.0,
    ) -> None:
        self._registry = registry
        self._directory = Path(directory)
        self._path = _file_of(self._directory, index)
        self._lock = threading.Lock()
        # The counts of the worker this one replaces, so its file's counters keep growing.
        self._carried = _read(self._path, summed_only=True)
        self._stopped = threading.Event()
        self._thread = threading.Thread(
            target=self._publish_every,
            args=(publish_period_s,),
            name=f"servinglib-worker-metrics-{index}",
            daemon=True,
        )
        self._thread.start()

    def publish(self) -> None:
        """Writes this worker's current samples (with its predecessor's counts) to its file."""
        with self._lock:
            own = _families_of(self._registry.collect())
            _write(self._path, _merged([(None, self._carried), (None, own)]))

    def render(self) -> bytes:
        """The Prometheus text of every worker's metrics: counters and histograms summed."""
        self.publish()
        files = sorted(self._directory.glob("worker-*.json"))
        workers = [(path.stem.removeprefix("worker-"), _read(path)) for path in files]
        from servinglib.server.observe.exposition import render

        return render(_Collector(_merged(workers)).collect())

    def close(self) -> None:
        """Stops the periodic publishing (after one last write)."""
        self._stopped.set()
        self._thread.join()
        self.publish()

    def _publish_every(self, period_s: float) -> None:
        while not self._stopped.wait(period_s):
            self.publish()


def forget_gauges(directory: str | os.PathLike[str], index: int) -> None:
    """Drops the gauges of a worker that exited from its file, keeping its counts.

    Requires: the worker ``index`` is not running (the supervisor calls it when one exits).
    """
    path = _file_of(Path(directory), index)
    if path.exists():
        _write(path, _read(path, summed_only=True))


def _file_of(directory: Path, index: int) -> Path:
    return directory / f"worker-{index}.json"


def _families_of(metrics: Iterable[Any]) -> _Families:
    families: _Families = {}
    for metric in metrics:
        samples = {
            (sample.name, tuple(sorted(sample.labels.items()))): float(sample.value)
            for sample in metric.samples
        }
        families[metric.name] = [metric.type, metric.documentation, samples]
    return families


def _merged(parts: Iterable[tuple[str | None, _Families]]) -> _Families:
    """Sums counters and histograms; gauges kept apart, labelled by worker when one is named."""
    merged: _Families = {}
    for worker, families in parts:
        for name, (kind, documentation, samples) in families.items():
            into = merged.setdefault(name, [kind, documentation, {}])[2]
            for (sample_name, labels), value in samples.items():
                if kind not in _SUMMED:
                    named = labels if worker is None else (*labels, (_WORKER_LABEL, worker))
                    into[sample_name, named] = value
                elif sample_name.endswith("_created"):
                    into[sample_name, labels] = min(value, into.get((sample_name, labels), value))
                else:
                    into[sample_name, labels] = into.get((sample_name, labels), 0.0) + value
    return merged


def _write(path: Path, families: _Families) -> None:
    document = {
        name: [kind, documentation, [[s, dict(labels), v] for (s, labels), v in samples.items()]]
        for name, (kind, documentation, samples) in families.items()
    }
    temporary = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    temporary.write_text(json.dumps(document), encoding="utf-8")
    os.replace(temporary, path)  # readers see the old file or the new one, never half


def _read(path: Path, *, summed_only: bool = False) -> _Families:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return {
        name: [
            kind,
            documentation,
            {(s, tuple(sorted(labels.items()))): float(v) for s, labels, v in samples},
        ]
        for name, (kind, documentation, samples) in document.items()
        if kind in _SUMMED or not summed_only
    }


@final
class _Collector:
    """Yields merged families as prometheus_client metrics, for the exposition renderer."""

    def __init__(self, families: _Families) -> None:
        self._families = families

    def collect(self) -> Iterator[Any]:
        from prometheus_client.metrics_core import Metric

        for name, (kind, documentation, samples) in sorted(self._families.items()):
            metric = Metric(name, documentation, kind)
            for (sample_name, labels), value in samples.items():  # buckets stay in order
                metric.add_sample(sample_name, dict(labels), value)
            yield metric
