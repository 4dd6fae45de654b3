"""Benchmark: 64 concurrent one-row clients with batching against without, through ServerCore.

The model is a Keras MLP (input 256 → Dense 256 x3, a SavedModel written by this script), and
the same MLP as a numpy Python servable. Clients are 64 asyncio tasks in one event loop, each
sending one-row requests back to back through the DataPlane (the path every front end takes:
handle, signature, execution mode, deadline) for ``--seconds`` per cell:

1. offline: the signature called directly (``call_signature``, no server) at batch 1..64,
   µs per call: the compute time of a batch, and the best rate batching could reach;
2. served without batching (signatures run on the DataPlane's worker pool) and with batching
   (``BatchingParameters`` printed below): requests/s, latency p50/p99, rows per model call.

Targets (issue 6, for the SavedModel): throughput with/without ≥ 5x; mean rows per call ≥ 16;
p99 ≤ batch timeout + 3 x the compute time of a batch of the mean size. The numpy servable's
figures are reported only (its call is ~20 µs, so batching gains less). Also printed: the
served rate as a share of the offline rate at that batch size. PASS/MISS; never fails a MISS.
Run with ``./dev bench batching`` (pinned to one CPU, see bench/README.md).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
from _common import INDENT, PercentileTable, print_environment, print_target
from loaders_call import build_keras_mlp

from servinglib import LoadRetryOptions, ManagerOptions
from servinglib.batching import BatchingParameters
from servinglib.loaders.python import PythonPlatformConfig
from servinglib.servable import call_signature
from servinglib.server import (
    DataPlane,
    ModelConfig,
    ModelServerConfig,
    ModelSpec,
    ServerCore,
    ServerCoreOptions,
)

CLIENTS = 64
BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64)

NUMPY_MODEL = '''
import numpy as np
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    """The Keras MLP's shape in numpy: 256 -> Dense 256 relu x2 -> Dense 256."""

    def load(self, path):
        rng = np.random.default_rng(1)
        self.layers = [
            (rng.standard_normal((256, 256), np.float32) * 0.06, np.zeros(256, np.float32))
            for _ in range(3)
        ]

    @signature(
        name="serving_default",
        inputs=[TensorSpec("features", "float32", [-1, 256])],
        outputs=[TensorSpec("output_0", "float32", [-1, 256])],
    )
    def predict(self, features):
        x = features
        for i, (w, b) in enumerate(self.layers):
            x = x @ w + b
            if i < 2:
                np.maximum(x, 0, out=x)
        return {"output_0": x}
'''


def write_models(root: Path) -> dict[str, ModelConfig]:
    build_keras_mlp(str(root / "mlp" / "1"))
    numpy_version = root / "numpy_mlp" / "1"
    numpy_version.mkdir(parents=True)
    (numpy_version / "model.py").write_text(textwrap.dedent(NUMPY_MODEL))
    return {
        "SavedModel MLP": ModelConfig("mlp", str(root / "mlp"), "tensorflow"),
        "numpy MLP": ModelConfig("numpy_mlp", str(root / "numpy_mlp"), "python"),
    }


def core_options(batching: BatchingParameters | None) -> ServerCoreOptions:
    return ServerCoreOptions(
        platform_configs={"python": PythonPlatformConfig(allow_code_execution=True)},
        batching_parameters=batching,
        manager=ManagerOptions(load_retry=LoadRetryOptions(max_num_load_retries=0)),
    )


def input_name(core: ServerCore, name: str) -> str:
    signature = core.model_metadata(ModelSpec.latest(name)).signatures["serving_default"]
    return next(iter(signature.inputs))


def offline_us(core: ServerCore, name: str, calls: int) -> dict[int, float]:
    """p50 µs of one direct call_signature at each batch size (no server on the path)."""
    key = input_name(core, name)
    figures = {}
    with core.servable_handle(ModelSpec.latest(name)) as handle:
        for batch in BATCH_SIZES:
            inputs = {key: np.random.default_rng(batch).random((batch, 256), np.float32)}
            for _ in range(20):
                call_signature(handle.servable, None, inputs)
            samples = []
            for _ in range(calls):
                start = time.perf_counter()
                call_signature(handle.servable, None, inputs)
                samples.append(time.perf_counter() - start)
            figures[batch] = statistics.median(samples) * 1e6
    return figures


async def drive(plane: DataPlane, name: str, key: str, seconds: float) -> tuple[int, list[float]]:
    """CLIENTS tasks sending one-row requests back to back; returns (requests, latencies ms)."""
    spec = ModelSpec.latest(name)
    stop_at = time.perf_counter() + seconds
    latencies: list[float] = []

    async def client(i: int) -> None:
        inputs = {key: np.full((1, 256), i / CLIENTS, np.float32)}
        while True:
            start = time.perf_counter()
            if start >= stop_at:
                return
            await plane.infer(spec, None, inputs)
            latencies.append((time.perf_counter() - start) * 1e3)

    await asyncio.gather(*(client(i) for i in range(CLIENTS)))
    return len(latencies), latencies


def served(
    config: ModelConfig, batching: BatchingParameters | None, seconds: float
) -> tuple[float, list[float], float]:
    """(requests/s, latencies ms, mean rows per model call) with or without batching."""
    with ServerCore(ModelServerConfig([config]), core_options(batching)) as core:
        plane = DataPlane(core)
        key = input_name(core, config.name)
        asyncio.run(drive(plane, config.name, key, min(1.0, seconds / 3)))  # warm-up
        before = _rows_and_batches(core)
        count, latencies = asyncio.run(drive(plane, config.name, key, seconds))
        after = _rows_and_batches(core)
        plane.close()
    rows, batches = after[0] - before[0], after[1] - before[1]
    mean_rows = rows / batches if batches else 1.0
    return count / seconds, latencies, mean_rows


def _rows_and_batches(core: ServerCore) -> tuple[int, int]:
    scheduler = core.batch_scheduler
    if scheduler is None:
        return 0, 0
    stats = list(scheduler.statistics().values())
    return sum(s.rows_run for s in stats), sum(s.batches_run for s in stats)


def compute_us(offline: dict[int, float], rows: float) -> float:
    """The offline compute time of a batch of ``rows`` (interpolated between measured sizes)."""
    sizes = sorted(offline)
    for low, high in itertools.pairwise(sizes):
        if low <= rows <= high:
            share = (rows - low) / (high - low)
            return offline[low] + share * (offline[high] - offline[low])
    return offline[sizes[-1]] if rows > sizes[-1] else offline[sizes[0]]


def report(
    label: str,
    config: ModelConfig,
    params: BatchingParameters,
    args: argparse.Namespace,
    *,
    targets: bool,
) -> None:
    print(f"\n{label}")
    with ServerCore(ModelServerConfig([config]), core_options(None)) as core:
        offline = offline_us(core, config.name, args.calls)
    print(f"{INDENT}offline, one direct call_signature (p50 µs per call, rows/s):")
    for batch, us in offline.items():
        print(f"{INDENT}  batch {batch:>3}: {us:>8.1f} µs  {batch / us * 1e6:>10,.0f} rows/s")
    plain_rate, plain_lat, _ = served(config, None, args.seconds)
    batched_rate, batched_lat, mean_rows = served(config, params, args.seconds)
    table = PercentileTable(26, ["p50", "p99"])
    print(f"{INDENT}served, {CLIENTS} clients of one row (latency ms):")
    print(table.header("") + f"{'req/s':>10}")
    print(table.row("without batching", plain_lat) + f"{plain_rate:>10,.0f}")
    print(table.row("with batching", batched_lat) + f"{batched_rate:>10,.0f}")
    compute_ms = compute_us(offline, mean_rows) / 1e3
    offline_rate = mean_rows / (compute_ms / 1e3)
    p99 = sorted(batched_lat)[int(0.99 * len(batched_lat)) - 1]
    bound_ms = params.batch_timeout_s * 1e3 + 3 * compute_ms
    print(
        f"{INDENT}rows per model call {mean_rows:.1f}; compute of such a batch {compute_ms:.3f} ms;"
        f" served rate = {batched_rate / offline_rate:.0%} of the offline rate at that size"
        f" ({offline_rate:,.0f} rows/s)"
    )
    if not targets:
        print(
            f"{INDENT}(report only) throughput with batching {batched_rate / plain_rate:.1f}x "
            f"without; p99 {p99:.2f} ms against timeout + 3 x batch compute = {bound_ms:.2f} ms"
        )
        return
    print_target(
        batched_rate >= 5 * plain_rate,
        f"{label}: throughput with batching {batched_rate / plain_rate:.1f}x without (target ≥ 5x)",
    )
    print_target(mean_rows >= 16, f"{label}: {mean_rows:.1f} rows per call (target ≥ 16)")
    print_target(
        p99 <= bound_ms,
        f"{label}: p99 {p99:.2f} ms ≤ timeout + 3 x batch compute = {bound_ms:.2f} ms",
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="per served cell")
    parser.add_argument("--calls", type=int, default=300, help="offline calls per batch size")
    parser.add_argument("--timeout-ms", type=float, default=1.0, help="batch_timeout")
    parser.add_argument("--threads", type=int, default=1, help="num_batch_threads")
    parser.add_argument(
        "--switch-interval-ms", type=float, default=None, help="sys.setswitchinterval (GIL)"
    )
    args = parser.parse_args()
    if args.switch_interval_ms is not None:
        sys.setswitchinterval(args.switch_interval_ms / 1e3)
    params = BatchingParameters(
        max_batch_size=CLIENTS,
        batch_timeout_s=args.timeout_ms / 1e3,
        max_enqueued_batches=CLIENTS,
        num_batch_threads=args.threads,
    )
    print_environment("bench/batching.py: 64 one-row clients through ServerCore + DataPlane")
    print(
        f"batching: max_batch_size {params.max_batch_size}, batch_timeout "
        f"{params.batch_timeout_s * 1e3:g} ms, max_enqueued_batches "
        f"{params.max_enqueued_batches}, num_batch_threads {params.num_batch_threads}; "
        f"{args.seconds:g} s per served cell"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for label, config in write_models(Path(tmp)).items():
            report(label, config, params, args, targets=label == "SavedModel MLP")


if __name__ == "__main__":
    main()
