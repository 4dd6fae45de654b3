"""Benchmark: many registered Python models, a budget for a few, Zipf-distributed requests.

In one process: a ServerCore with ``--models`` (1,000) small Python models registered
(``load_models_on_demand``) and a memory budget for ``--resident`` (100) of them, and a
DataPlane that ``--clients`` (16) threads call (``infer_blocking``, as the synchronous gRPC
server's threads do), each request naming a model drawn from a Zipf distribution of exponent
``--zipf`` (1.1) over the models, ``--requests`` (20,000) in all. Then the same requests
against a server with the ``--resident`` most popular models simply loaded (the warm
baseline). Prints:

- start to ready, threads and RSS at ready, and a config reload of all the models (one
  added), each for the on-demand server;
- the hit ratio (requests that found their model loaded), errors, loads and evictions;
- warm p50/p99 (requests that found their model loaded) against the baseline's (target: p99
  <= 1.2 x), cold p50 (requests that started a load) against the loads' own p50 (target: +5 ms
  at most);
- the RSS at the end against the budget.

Run: ``PYTHONPATH=. python bench/many_models.py --models 10000`` (issue 37's target), and with
``--models 1000`` to see how each figure grows; the figures are in docs/guides/many-models.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from servinglib import ManagerOptions, testing
from servinglib.core.on_demand_loads import Residency
from servinglib.loaders import PythonPlatformConfig
from servinglib.server import ModelConfig, ModelServerConfig, ModelSpec, ServerCore
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.server_core_options import ServerCoreOptions

MODEL_PY = """
from servinglib.loaders import PythonModel, signature
from servinglib.servable import ExecutionMode, TensorSpec

class Model(PythonModel):
    def load(self, path):
        with open(path + "/weights.bin", "rb") as weights:
            self.weights = weights.read()

    @signature(name="serving_default", inputs=[TensorSpec("x", "float32", [-1])],
               outputs=[TensorSpec("y", "float32", [-1])], execution_mode=ExecutionMode.INLINE)
    def predict(self, x):
        return {"y": x + 1}
"""
WEIGHTS_BYTES = 64 << 10
PLATFORM = {"python": PythonPlatformConfig(allow_code_execution=True)}


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def write_models(root: Path, count: int) -> list[ModelConfig]:
    weights = {"weights.bin": bytes(WEIGHTS_BYTES)}
    return [
        ModelConfig.python(
            f"m{i}", testing.write_python_model(root, f"m{i}", MODEL_PY, files=weights)
        )
        for i in range(count)
    ]


def zipf_names(count: int, requests: int, exponent: float, seed: int) -> list[str]:
    """``requests`` model names, the i-th most popular drawn with weight 1 / (i+1)^exponent."""
    ranks = np.arange(1, count + 1, dtype=np.float64)
    weights = ranks**-exponent
    rng = np.random.default_rng(seed)
    return [f"m{i}" for i in rng.choice(count, size=requests, p=weights / weights.sum())]


def run_requests(plane: DataPlane, names: list[str], clients: int) -> list[tuple[str, float, bool]]:
    """Each request: (model, latency s, whether it started or waited for a load)."""
    on_demand = plane.core.on_demand
    x = {"x": np.ones(1, np.float32)}
    results: list[tuple[str, float, bool]] = []
    lock = threading.Lock()
    chunks = [names[i::clients] for i in range(clients)]

    def client(chunk: list[str]) -> None:
        mine = []
        for name in chunk:
            cold = on_demand.residency(name) is not Residency.LOADED
            started = time.perf_counter()
            try:
                plane.infer_blocking(
                    ModelSpec.latest(name), None, x, deadline=time.monotonic() + 60
                )
            except Exception as error:  # noqa: BLE001 - counted as an error
                mine.append((f"error: {error}", time.perf_counter() - started, cold))
                continue
            mine.append((name, time.perf_counter() - started, cold))
        with lock:
            results.extend(mine)

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, chunks))
    return results


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) * 1e3 if values else float("nan")


def serve_on_demand(
    args: argparse.Namespace, models: list[ModelConfig], budget: int, names: list[str]
) -> dict[str, Any]:
    """Starts the on-demand server, runs the requests, reloads the config; what it measured."""
    kinds: list[str] = []
    load_s: list[float] = []
    threads_before = threading.active_count()
    started = time.perf_counter()
    threads = args.load_threads
    options = ServerCoreOptions(
        platform_configs=PLATFORM,
        load_models_on_demand=True,
        total_model_memory_limit_bytes=budget,
        manager=ManagerOptions(num_load_threads=threads, num_unload_threads=threads),
    )
    with ServerCore(ModelServerConfig(models), options) as core:
        testing.wait_until(core.ready, 600)
        ready_s = time.perf_counter() - started
        threads = threading.active_count() - threads_before
        rss_ready = rss_bytes()
        core.on_demand.events.subscribe(lambda event: kinds.append(event.kind))
        core.on_demand.events.subscribe(
            lambda event: load_s.append(event.seconds) if event.kind == "loaded" else None
        )
        plane = DataPlane(core)
        try:
            results = run_requests(plane, names, args.clients)
        finally:
            plane.close()
        extra = ModelConfig.python("extra", models[0].base_path)
        started = time.perf_counter()
        core.reload_config(ModelServerConfig([*models, extra]))
        reload_s = time.perf_counter() - started
        return {
            "ready_s": ready_s,
            "threads": threads,
            "rss_ready": rss_ready,
            "results": results,
            "kinds": kinds,
            "load_s": load_s,
            "reload_s": reload_s,
            "rss_end": rss_bytes(),
            "statistics": core.on_demand.statistics(),
        }


def serve_loaded(
    args: argparse.Namespace, models: list[ModelConfig], names: list[str]
) -> list[float]:
    """The baseline: the ``--resident`` most popular models simply loaded; its latencies."""
    hot = {f"m{i}" for i in range(args.resident)}
    with ServerCore(
        ModelServerConfig(models[: args.resident]), ServerCoreOptions(platform_configs=PLATFORM)
    ) as core:
        plane = DataPlane(core)
        try:
            results = run_requests(plane, [name for name in names if name in hot], args.clients)
        finally:
            plane.close()
    return [latency for _, latency, _ in results]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", type=int, default=1000)
    parser.add_argument("--resident", type=int, default=100)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--zipf", type=float, default=1.1)
    parser.add_argument("--seed", type=int, default=37)
    parser.add_argument("--load-threads", type=int, default=0, help="and unload threads")
    parser.add_argument(
        "--switch-interval-ms",
        type=float,
        default=None,
        help="sys.setswitchinterval for the run (default: Python's 5 ms)",
    )
    args = parser.parse_args()
    if args.switch_interval_ms is not None:
        sys.setswitchinterval(args.switch_interval_ms / 1e3)

    models = write_models(Path(tempfile.mkdtemp(prefix="many_models-")), args.models)
    estimate = int((WEIGHTS_BYTES + len(MODEL_PY)) * 1.2)
    budget = int(estimate * (args.resident + 0.5))
    names = zipf_names(args.models, args.requests, args.zipf, args.seed)
    run = serve_on_demand(args, models, budget, names)
    baseline = serve_loaded(args, models, names)

    results, kinds, stats = run["results"], run["kinds"], run["statistics"]
    errors = [r for r in results if r[0].startswith("error")]
    warm = [latency for _, latency, cold in results if not cold]
    cold = [latency for _, latency, was_cold in results if was_cold]
    print(
        f"{args.models} registered models: ready in {run['ready_s']:.2f} s, "
        f"{run['threads']} threads more, RSS {run['rss_ready'] >> 20} MiB; "
        f"config reload of them (+1): {run['reload_s']:.2f} s"
    )
    print(
        f"requests {len(results)}, errors {len(errors)}, hit ratio {len(warm) / len(results):.3f}, "
        f"loads {kinds.count('loaded')}, evictions {kinds.count('evicted')}"
    )
    print(
        f"resident at the end: {stats.resident_models} models, {stats.resident_bytes} of "
        f"{budget} budget bytes; RSS {run['rss_end'] >> 20} MiB"
    )
    print(
        f"warm p50 {percentile(warm, 50):.3f} ms p99 {percentile(warm, 99):.3f} ms; "
        f"baseline ({args.resident} loaded) p50 {percentile(baseline, 50):.3f} ms "
        f"p99 {percentile(baseline, 99):.3f} ms; p99 ratio "
        f"{percentile(warm, 99) / percentile(baseline, 99):.2f} (target <= 1.2)"
    )
    load_p50 = statistics.median(run["load_s"]) * 1e3 if run["load_s"] else float("nan")
    print(
        f"cold p50 {percentile(cold, 50):.2f} ms; the loads' own p50 {load_p50:.2f} ms "
        "(target: cold <= load + 5 ms)"
    )
    if errors:
        print("first errors:", errors[:3])


if __name__ == "__main__":
    main()
