"""Benchmark: what inference statistics and tracing cost on the request path, in one run.

Variants, each measured back to back in the same run:

- ``before``: servinglib as it was at ``--base`` (default: the merge base with ``main``), without
  statistics or tracing, exported from git into a scratch directory and run with
  ``python -P`` and ``PYTHONPATH`` pointing there;
- ``tracing off``: this tree (statistics are always on; tracing off is one attribute test);
- ``tracing on``: this tree with every request sampled, its spans batched and exported by
  OTLP/HTTP to a receiver process (a plain HTTP server answering 200) on the other CPU;
- ``tracing 1 %``: the same with ``OTEL_TRACES_SAMPLER=traceidratio`` at 0.01.

1. In-process (no sockets, least noise): ``DataPlane.infer`` on the trivial numpy servable
   (float32 [1,16] -> x + 1) in ``thread`` and ``inline`` mode, ``--calls`` sequential requests
   on one event loop, best of ``--rounds``; µs per request and the difference to ``before``.
2. Over the wire: ``python -m servinglib`` pinned to one CPU, V2 infer over REST (wrk, JSON)
   and gRPC (h2load, raw contents) on the ``thread`` servable at ``--concurrency``; req/s and
   the ratio to ``before``, with ``uptime``'s load printed beside each pass.

Targets: tracing off costs nothing measurable against ``before`` beyond the statistics' own
cost (in-process: at most 2 µs per request; over the wire: within 3 %). Run with
``./dev bench observability`` (needs wrk and h2load for part 2).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.server
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# This directory holds grpc.py: keep it from shadowing grpc (the bench modules are loaded by
# path, see _bench_module).
if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
    sys.path.append(sys.path.pop(0))

from _common import INDENT, print_environment, print_target
from _servers import TRIVIAL_MODELS, free_port, pinned, write_trivial_models

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent
VARIANTS = ("before", "tracing off", "tracing on", "tracing 1 %")
TRACED = ("tracing on", "tracing 1 %")
OFF_COST_US = 2.0
OFF_RATIO = 0.97


# --------------------------------------------------------------------------- in-process


def in_process(calls: int, rounds: int, tracing: bool) -> dict[str, float]:
    """µs per DataPlane.infer for each trivial servable (run by the ``--in-process`` child)."""
    import numpy as np

    from servinglib.server.config import ModelConfig, ModelServerConfig
    from servinglib.server.model_spec import ModelSpec
    from servinglib.server.plane.data_plane import DataPlane
    from servinglib.testing.plugin import TEST_SERVER_CORE_OPTIONS

    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        write_trivial_models(tmp)
        config = ModelServerConfig(
            [ModelConfig.python(model, str(tmp / model)) for model in TRIVIAL_MODELS.values()]
        )
        from servinglib.server.server_core import ServerCore

        core = ServerCore(config, TEST_SERVER_CORE_OPTIONS)
        extra = {}
        if tracing:
            from servinglib.server.observe.tracing import Tracing

            extra["tracing"] = Tracing.from_environment()
        plane = DataPlane(core, **extra)  # type: ignore[arg-type]
        x = {"x": np.arange(16, dtype=np.float32).reshape(1, 16)}
        figures = {}

        async def run(spec: ModelSpec) -> float:
            for _ in range(calls // 4):  # warm-up: caches, the pool's threads
                await plane.infer(spec, None, x)
            best = float("inf")
            for _ in range(rounds):
                started = time.perf_counter()
                for _ in range(calls):
                    await plane.infer(spec, None, x)
                best = min(best, (time.perf_counter() - started) / calls * 1e6)
            return best

        try:
            for mode, model in TRIVIAL_MODELS.items():
                figures[mode] = asyncio.run(run(ModelSpec.latest(model)))
        finally:
            plane.close()
            core.close()
            if tracing:
                extra["tracing"].shutdown()  # type: ignore[attr-defined]
    return figures


def child(calls: int, rounds: int, tracing: bool) -> None:
    """The in-process measurement's child: prints ``mode=µs`` pairs."""
    figures = in_process(calls, rounds, tracing)
    print(" ".join(f"{mode}={us:.3f}" for mode, us in figures.items()))


def measure_in_process(
    args: argparse.Namespace, environments: dict[str, dict[str, str]]
) -> dict[str, dict[str, float]]:
    """Each variant's best µs per request over ``--passes`` children, variants interleaved."""
    results: dict[str, dict[str, float]] = {}
    for number in range(args.passes):
        for variant, environment in environments.items():
            # -P and the bench directory appended last: servinglib comes from PYTHONPATH
            # (before) or the installed tree, and bench/grpc.py never shadows grpc.
            child = (
                f"import sys; sys.path.append({str(HERE)!r}); import observability; "
                f"observability.child({args.calls}, {args.rounds}, {variant in TRACED})"
            )
            command = [sys.executable, "-P", "-c", child]
            done = subprocess.run(
                pinned(command, os.environ.get("SERVINGLIB_BENCH_SERVER_CPUS")),
                capture_output=True,
                text=True,
                check=False,
                env=environment,
                cwd="/",
            )
            if done.returncode != 0:
                raise RuntimeError(f"{variant}: {done.stdout}\n{done.stderr}")
            line = done.stdout.strip().splitlines()[-1]
            figures = {k: float(v) for k, v in (part.split("=") for part in line.split())}
            best = results.setdefault(variant, figures)
            for mode, us in figures.items():
                best[mode] = min(best[mode], us)
            print(
                f"{INDENT}pass {number + 1}, {variant:<12} "
                + ", ".join(f"{m} {us:.2f}" for m, us in figures.items())
                + f" (load average {os.getloadavg()[0]:.2f})",
                flush=True,
            )
    return results


# --------------------------------------------------------------------------- over the wire


def serve_receiver(port: int) -> None:
    """A plain HTTP server answering 200 to every POST (``--receiver``): where spans go."""

    class Sink(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_args: object) -> None:
            pass

    http.server.ThreadingHTTPServer(("127.0.0.1", port), Sink).serve_forever()


@contextlib.contextmanager
def receiver(cpus: str | None) -> Iterator[str]:
    port = free_port()
    command = [sys.executable, str(Path(__file__).resolve()), "--receiver", f"--port={port}"]
    process = subprocess.Popen(pinned(command, cpus), stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            with contextlib.suppress(OSError):
                import socket

                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            if time.monotonic() > deadline:
                raise RuntimeError("the OTLP sink did not start")
            time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/v1/traces"
    finally:
        process.kill()
        process.wait()


def measure_wire(
    args: argparse.Namespace, environments: dict[str, dict[str, str]], tmp: Path
) -> dict[tuple[str, str], float]:
    """Each variant's best req/s per protocol over ``--passes``, all servers up, interleaved."""
    grpc_bench = _bench_module("grpc")
    rest_bench = _bench_module("rest")
    config = write_trivial_models(tmp)
    rest_workload = next(
        w for w in rest_bench.trivial_workloads() if w.label == "V2 /infer, thread"
    )
    grpc_workload = next(w for w in grpc_bench.workloads() if w.label == "V2 raw, thread")
    results: dict[tuple[str, str], float] = {}
    cpus = os.environ.get("SERVINGLIB_BENCH_SERVER_CPUS")
    with contextlib.ExitStack() as stack:
        ports = {}
        for variant, environment in environments.items():
            port, rest_port = free_port(), free_port()
            command = [
                sys.executable,
                "-P",
                "-m",
                "servinglib",
                f"--model_config_file={config}",
                "--allow_python_code_execution",
                f"--port={port}",
                f"--rest_api_port={rest_port}",
                "--rest_api_host=127.0.0.1",
                "--grpc_host=127.0.0.1",
                *(["--enable_tracing"] if variant in TRACED else []),
            ]
            log = tmp / f"server-{len(ports)}.log"
            with open(log, "wb") as out:
                process = subprocess.Popen(
                    pinned(command, cpus), stdout=out, stderr=subprocess.STDOUT, env=environment
                )
            stack.callback(_stop, process)
            grpc_bench.wait_for_grpc(port, process, log)
            rest_bench.post(rest_port, rest_workload.path, rest_workload.body)
            ports[variant] = (rest_port, port)
        for number in range(args.passes):
            for variant, (rest_port, port) in ports.items():
                load = os.getloadavg()[0]
                rest_cell = rest_bench.measure(
                    rest_port, rest_workload, args.concurrency, args=args, tmp=tmp
                )
                grpc_cell = grpc_bench.measure(
                    variant,
                    port,
                    grpc_workload,
                    args.concurrency,
                    args=args,
                    tmp=tmp,
                    multiplexed=args.multiplexed,
                )
                if rest_cell.non2xx or rest_cell.socket_errors or grpc_cell.failed:
                    raise RuntimeError(f"{variant}: errors under load")
                for protocol, rps in (("REST", rest_cell.rps), ("gRPC", grpc_cell.rps)):
                    results[variant, protocol] = max(results.get((variant, protocol), 0.0), rps)
                print(
                    f"{INDENT}pass {number + 1}, {variant:<12} REST {rest_cell.rps:>7.0f} req/s, "
                    f"gRPC {grpc_cell.rps:>7.0f} req/s (load average {load:.2f})",
                    flush=True,
                )
    return results


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


# --------------------------------------------------------------------------- main


def _bench_module(name: str) -> Any:  # noqa: ANN401 - a module
    """bench/NAME.py as module ``bench_NAME`` (bench/grpc.py would shadow grpc by its name)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"bench_{name}", HERE / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def base_tree(ref: str, tmp: Path) -> Path:
    """servinglib's package at ``ref`` (a merge base by default), exported from git."""
    if ref == "":
        ref = subprocess.run(
            ["git", "merge-base", "HEAD", "main"],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        ).stdout.strip()
    target = tmp / "base"
    target.mkdir()
    archive = subprocess.run(
        ["git", "archive", ref, "servinglib"], capture_output=True, check=True, cwd=ROOT
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(target)], input=archive, check=True)
    print(f"{INDENT}before = {ref[:12]} (git archive into {target})")
    return target


def environments(base: Path, endpoint: str) -> dict[str, dict[str, str]]:
    here = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    here.pop("PYTHONPATH", None)
    traced = {**here, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint}
    return {
        "before": {**here, "PYTHONPATH": str(base)},
        "tracing off": here,
        "tracing on": traced,
        "tracing 1 %": {
            **traced,
            "OTEL_TRACES_SAMPLER": "traceidratio",
            "OTEL_TRACES_SAMPLER_ARG": "0.01",
        },
    }


def record_cost_us(calls: int = 200_000) -> float:
    """µs per InferenceStatistics.record_success, alone (this tree)."""
    from servinglib.servable import CallStages
    from servinglib.server.observe.statistics import InferenceStatistics

    statistics = InferenceStatistics()
    stages = CallStages()
    stages.queued_ns, stages.started_ns, stages.infer_started_ns = 1, 2, 3
    stages.infer_ended_ns = stages.ended_ns = 4
    record = statistics.record_success
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(calls):
            record("m", 1, 0, 10, stages)
        best = min(best, (time.perf_counter() - started) / calls * 1e6)
    return best


def report(in_proc: dict[str, dict[str, float]], wire: dict[tuple[str, str], float] | None) -> None:
    print("\n3. Summary")
    print(f"{INDENT}InferenceStatistics.record_success alone: {record_cost_us():.2f} µs per call")
    before = in_proc["before"]
    for variant in VARIANTS[1:]:
        parts = [
            f"{mode} {in_proc[variant][mode]:.1f} µs ({in_proc[variant][mode] - before[mode]:+.1f})"
            for mode in TRIVIAL_MODELS
        ]
        print(f"{INDENT}in-process, {variant} (best): " + ", ".join(parts))
    for mode in TRIVIAL_MODELS:
        cost = in_proc["tracing off"][mode] - before[mode]
        print_target(
            cost <= OFF_COST_US,
            f"in-process {mode}: statistics + tracing off cost {cost:+.2f} µs per request "
            f"(target <= {OFF_COST_US:g})",
        )
    if wire is None:
        return
    for protocol in ("REST", "gRPC"):
        base = wire["before", protocol]
        parts = [f"{v} {wire[v, protocol] / base:.3f}" for v in VARIANTS[1:]]
        print(f"{INDENT}{protocol} best req/s: before {base:.0f}; against it: " + ", ".join(parts))
        ratio = wire["tracing off", protocol] / base
        print_target(
            ratio >= OFF_RATIO,
            f"{protocol}: tracing off at {ratio:.3f} x before's req/s (target >= {OFF_RATIO})",
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="", help="git ref of 'before' (default: merge base)")
    parser.add_argument("--calls", type=int, default=20000, help="in-process requests per round")
    parser.add_argument("--rounds", type=int, default=5, help="in-process rounds (best kept)")
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per cell")
    parser.add_argument("--warmup-seconds", type=float, default=2.0, help="warm-up per cell")
    parser.add_argument("--concurrency", type=int, default=8, help="connections over the wire")
    parser.add_argument("--passes", type=int, default=3, help="interleaved passes (best kept)")
    parser.add_argument("--skip-wire", action="store_true", help="in-process figures only")
    parser.add_argument(
        "--multiplexed",
        action="store_true",
        help="gRPC: every request a stream of one connection (h2load -c1 -mN)",
    )
    parser.add_argument("--receiver", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.receiver:
        serve_receiver(args.port)
        return
    print_environment("bench/observability.py: statistics and tracing on the request path")
    wire_tools = shutil.which("wrk") and shutil.which("h2load")
    client_cpus = os.environ.get("SERVINGLIB_BENCH_CLIENT_CPUS")
    with tempfile.TemporaryDirectory() as name, receiver(client_cpus) as endpoint:
        tmp = Path(name)
        variants = environments(base_tree(args.base, tmp), endpoint)
        print(
            "\n1. In-process DataPlane.infer, µs per request "
            f"(best of {args.rounds} x {args.calls})"
        )
        in_proc = measure_in_process(args, variants)
        wire = None
        if args.skip_wire or not wire_tools:
            print("\n2. Over the wire: skipped" + ("" if wire_tools else " (needs wrk and h2load)"))
        else:
            print(f"\n2. Over the wire, V2 infer, thread mode, concurrency {args.concurrency}")
            wire = measure_wire(args, variants, tmp)
    report(in_proc, wire)


if __name__ == "__main__":
    main()
