"""Benchmark: a Triton ensemble served by servinglib and by Triton, and what one step costs.

The repository holds three trivial Python-backend steps, ``pre`` (x + 1), ``double`` (x * 2)
and ``post`` (x - 3), written as Triton's documentation writes them, the 3-step ensemble
``pipeline`` chaining them, and ``single``, an ensemble of ``pre`` alone.  The same directory is
served by the ``tritonserver`` of the ``nvidia-pytriton`` wheel (Triton 2.51, see
tests/triton/oracle.py) and by ``python -m servinglib --model_repository``, started as
bench/triton.py starts them.

1. ``pipeline`` at concurrency 8 over HTTP (wrk, V2 JSON) and gRPC (h2load, V2 ``ModelInfer``),
   each server pinned to the server CPU and the load generator to the other, the servers
   alternating pass by pass (the best pass counts): req/s and p50 per request (target:
   servinglib >= 2x Triton's req/s on both; Triton hands each step's tensors to a stub process
   and back, servinglib's steps run in its process and hand the arrays over as they are).
2. In process (one ServerCore and DataPlane over the same repository, this process's CPU):
   ``DataPlane.infer`` of ``single`` against ``infer`` of ``pre`` directly, and of
   ``pipeline`` against the sum of its three models; the difference is what an ensemble
   step costs over calling its model (target: <= 30 µs per step).  CPU time per call (the
   process's, every thread's: a step's cost, not the wait for a thread to wake), the median
   of interleaved rounds of ``--calls`` calls, measured twice: one caller at a time on
   asyncio's own event loop (every call a thread's wake-up and sleep), and 8 callers at once
   on uvloop, the loop and the concurrency the server's cell 1 runs with.

With ``--inline`` the three steps' configs set ``EXECUTION_MODE: inline`` (servinglib runs each
``execute`` on the event loop, and the ensemble with them; Triton ignores the parameter).

The cache hit's figures are bench/response_cache.py's.  Run with ``./dev bench pipelines``;
needs ``wrk``, ``h2load`` and the Triton that ``./dev setup`` installs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from _common import INDENT, print_environment, print_target

# bench/triton.py: the servers, the cells; importing it drops this directory from sys.path
# (bench/grpc.py would shadow grpcio) and puts the checkout's root there (for tests.triton).
from triton import (
    SERVINGLIB_FLAGS,
    Cell,
    Workload,
    add_inline_flag,
    add_servinglib_flag,
    add_threads_flag,
    best,
    check_answers,
    print_threads,
    require_triton_and_load_generators,
    run_cell,
    run_inline,
    servinglib,
    triton,
)

from tests.triton.pipeline_models import PIPELINE_CONFIG, chain_config, unary, write

THROUGHPUT_TARGET = 2.0
STEP_TARGET_US = 30.0
X = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
PIPELINE = Workload("pipeline", {"INPUT": X}, {"OUTPUT": (X + 1) * 2 - 3})

SINGLE_CONFIG = chain_config(("pre", -1, "IN", "OUT"))


def write_repository(root: Path) -> Path:
    """The three steps and the two ensembles, in Triton's layout; returns the repository."""
    unary(root, "pre", "x + 1")
    unary(root, "double", "x * 2")
    unary(root, "post", "x - 3")
    write(root, "pipeline", PIPELINE_CONFIG)
    write(root, "single", SINGLE_CONFIG)
    return root


def measure_servers(args: argparse.Namespace, repository: Path, tmp: Path) -> list[Cell]:
    """Cell 1 on both servers, pinned to the server CPU, alternating pass by pass."""
    cpus = os.environ.get("SERVINGLIB_BENCH_SERVER_CPUS")
    runs: dict[tuple[str, str], list[Cell]] = {}
    for _ in range(args.passes):
        for start in (triton, servinglib):
            with start(repository, tmp, cpus) as server:
                check_answers(server, PIPELINE)
                for protocol in ("http", "grpc"):
                    cell = run_cell(server, PIPELINE, protocol, 8, args=args, tmp=tmp)
                    runs.setdefault((server.name, cell.label), []).append(cell)
    return [best(cells) for cells in runs.values()]


def _uvloop() -> asyncio.AbstractEventLoop:
    import uvloop  # (the CLI server's loop: servinglib[server] installs it)

    return uvloop.new_event_loop()


IN_PROCESS_RUNS = (
    ("1 caller, asyncio's loop", 1, None),
    ("8 callers, uvloop", 8, _uvloop),
)


def measure_in_process(args: argparse.Namespace, repository: Path) -> dict[str, dict[str, float]]:
    """Cell 2: the CPU µs of one ``DataPlane.infer`` of each model, the median of
    interleaved rounds."""
    from servinglib.loaders import PythonPlatformConfig
    from servinglib.server import ModelServerConfig, ServerCore, ServerCoreOptions
    from servinglib.server.model_spec import ModelSpec
    from servinglib.server.plane.data_plane import DataPlane
    from servinglib.server.triton_repository import TritonRepository

    options = ServerCoreOptions(
        platform_configs={"python": PythonPlatformConfig(allow_code_execution=True)}
    )
    config = ModelServerConfig(TritonRepository(repository).scan().models)
    inputs = {
        "pre": {"IN": X},
        "double": {"IN": X},
        "post": {"IN": X},
        "single": {"INPUT": X},
        "pipeline": {"INPUT": X},
    }

    async def calls(plane: DataPlane, callers: int) -> dict[str, list[float]]:
        times: dict[str, list[float]] = {name: [] for name in inputs}

        async def caller(spec: ModelSpec, tensors: dict[str, np.ndarray]) -> None:
            for _ in range(args.calls // callers):
                await plane.infer(spec, None, tensors)

        for _ in range(args.rounds):
            for name, tensors in inputs.items():
                spec = ModelSpec.latest(name)
                started = time.process_time()  # every thread's CPU, not the wake-ups' waits
                await asyncio.gather(*(caller(spec, tensors) for _ in range(callers)))
                times[name].append((time.process_time() - started) / args.calls)
        return times

    figures: dict[str, dict[str, float]] = {}
    with ServerCore(config, options) as core:
        plane = DataPlane(core)
        try:
            for label, callers, loop in IN_PROCESS_RUNS:
                with asyncio.Runner(loop_factory=loop) as runner:
                    times = runner.run(calls(plane, callers))
                figures[label] = {n: statistics.median(v) * 1e6 for n, v in times.items()}
        finally:
            plane.close()
    return figures


def report(cells: list[Cell], in_process: dict[str, dict[str, float]]) -> None:
    by = {(cell.server, cell.label): cell for cell in cells}
    if cells:
        print("\n1. The 3-step ensemble at c=8 (best of the passes):")
        print(
            f"{INDENT}{'server':<11} {'cell':<20} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} "
            f"{'CPU µs':>7} {'errors':>6}"
        )
        for cell in cells:
            print(
                f"{INDENT}{cell.server:<11} {cell.label:<20} {cell.rps:>8.0f} "
                f"{cell.p50_ms:>7.2f} {cell.p99_ms:>7.2f} {cell.cpu_us:>7.0f} {cell.errors:>6}"
            )
            print_threads(cell)
        for protocol in ("http", "grpc"):
            label = f"pipeline {protocol} c8"
            ratio = by["servinglib", label].rps / by["Triton", label].rps
            p50 = by["Triton", label].p50_ms / by["servinglib", label].p50_ms
            print_target(
                ratio >= THROUGHPUT_TARGET,
                f"{label}: {ratio:.2f}x Triton's req/s (>= 2x); p50 {p50:.2f}x lower",
            )
        errors = sum(cell.errors for cell in cells)
        print_target(errors == 0, f"errors: {errors} (0)")
    if not in_process:
        return
    print("\n2. In process, DataPlane.infer (CPU µs per call, median of the rounds):")
    labels = list(in_process)
    print(f"{INDENT}{'':<10} " + " ".join(f"{label:>26}" for label in labels))
    for name in in_process[labels[0]]:
        figures = " ".join(f"{in_process[label][name]:>26.1f}" for label in labels)
        print(f"{INDENT}{name:<10} {figures}")
    for label, us in in_process.items():
        one_step = us["single"] - us["pre"]
        three_steps = (us["pipeline"] - us["pre"] - us["double"] - us["post"]) / 3
        print_target(
            one_step <= STEP_TARGET_US,
            f"{label}: one step over its model: {one_step:.1f} µs (<= 30); per step of the "
            f"3-step ensemble over its models: {three_steps:.1f} µs",
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--warmup-seconds", type=float, default=2.0)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5, help="in-process rounds (cell 2)")
    parser.add_argument("--calls", type=int, default=1000, help="calls per model per round")
    add_servinglib_flag(parser)
    add_inline_flag(parser)
    add_threads_flag(parser)
    parser.add_argument("--only", choices=("servers", "in-process"), help="one cell")
    args = parser.parse_args()
    SERVINGLIB_FLAGS.extend(args.servinglib_flag)
    if args.only != "in-process":
        require_triton_and_load_generators("bench/pipelines.py")
    print_environment("bench/pipelines.py: a 3-step ensemble, servinglib against Triton 2.51")
    server_cpus = os.environ.get("SERVINGLIB_BENCH_SERVER_CPUS", "any")
    client_cpus = os.environ.get("SERVINGLIB_BENCH_CLIENT_CPUS", "any")
    print(f"{INDENT}cell 1: servers on CPU {server_cpus}, load on CPU {client_cpus}")
    cells: list[Cell] = []
    in_process: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        repository = write_repository(tmp / "models")
        if args.inline:
            for step in ("pre", "double", "post"):
                run_inline(repository / step / "config.pbtxt")
            print(f"{INDENT}the steps: EXECUTION_MODE inline")
        if args.only != "in-process":
            cells = measure_servers(args, repository, tmp)
        if args.only != "servers":
            in_process = measure_in_process(args, repository)
    report(cells, in_process)


if __name__ == "__main__":
    main()
