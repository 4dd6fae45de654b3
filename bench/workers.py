"""Benchmark: ``python -m servinglib --num_workers N``, N=1 against N=2, on every CPU.

The server under test is the CLI with REST and gRPC on, metrics on, in a subprocess allowed on
every CPU of the machine (``taskset``), serving two Python servables taking float32 [1,16]:
``python_1ms``, whose signature spends about 1 ms in pure-Python code (a loop calibrated when
it loads), and ``plus_one``, the trivial ``x + 1`` of the REST and gRPC benchmarks. The load
generators are wrk (REST, one thread) and h2load (gRPC, one thread), pinned where ``./dev
bench`` pins this script. For each N: a warm-up run, then ``--seconds`` of

1. REST ``:predict`` on ``python_1ms`` at concurrency 16;
2. gRPC ``Predict`` on ``python_1ms`` at concurrency 16;
3. REST ``:predict`` on ``plus_one`` at concurrency 64;

then the RSS of each worker and of the supervisor, and the supervisor's CPU time over the
measured runs. Figures: req/s, p50/p99 in ms, and the ratio N=2 / N=1 of each cell.
Target (issue 21): ``python_1ms`` N=2 >= 1.8 x N=1, REST and gRPC; the supervisor's CPU
about 0. PASS/MISS lines never fail the run. Run with ``./dev bench workers``; needs ``wrk``
and ``h2load``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from _common import INDENT, percentile, print_environment, print_target
from _load import WRK_LUA, grpc_frame, h2load, wrk
from _servers import free_port, pinned, running, write_trivial_models
from rest import X, predict_body

HERE = Path(__file__).resolve().parent
# bench/grpc.py by path: importing it as "grpc" would shadow the grpc package.
_spec = importlib.util.spec_from_file_location("grpc_bench", HERE / "grpc.py")
assert _spec is not None
assert _spec.loader is not None
grpc_bench = importlib.util.module_from_spec(_spec)
sys.modules["grpc_bench"] = grpc_bench  # its dataclasses look their module up
_spec.loader.exec_module(grpc_bench)

PYTHON_MODEL = "python_1ms"
TRIVIAL_MODEL = "plus_one"
SPEEDUP_TARGET = 1.8
START_TIMEOUT_S = 120.0

PYTHON_1MS_PY = '''
import time
import numpy as np
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec


def _spin(loops):
    total = 0
    for i in range(loops):
        total += i * i
    return total


class Model(PythonModel):
    """float32 [1,16] -> x + 1, after ~1 ms of pure-Python work (holding the GIL)."""

    def load(self, path):
        started = time.perf_counter()
        _spin(200_000)
        per_loop_s = (time.perf_counter() - started) / 200_000
        self.loops = max(1, int(1e-3 / per_loop_s))

    @signature(
        name="serving_default",
        inputs=[TensorSpec("x", np.float32, [1, 16])],
        outputs=[TensorSpec("y", np.float32, [1, 16])],
    )
    def predict(self, x):
        _spin(self.loops)
        return {"y": x + np.float32(1)}
'''


@dataclasses.dataclass(frozen=True)
class Cell:
    """One measured cell: requests per second and latency percentiles (ms)."""

    label: str
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int


@dataclasses.dataclass(frozen=True)
class Run:
    """Every cell of one N, with the processes' RSS and the supervisor's CPU seconds."""

    num_workers: int
    cells: list[Cell]
    worker_rss_mb: list[float]
    supervisor_rss_mb: float | None
    supervisor_cpu_s: float | None
    measured_s: float


def write_models(tmp: Path) -> Path:
    """The two servables; their models.config."""
    write_trivial_models(tmp)
    directory = tmp / PYTHON_MODEL / "1"
    directory.mkdir(parents=True)
    (directory / "model.py").write_text(PYTHON_1MS_PY)
    config = tmp / "workers.config"
    config.write_text(
        "model_config_list {\n"
        + "".join(
            f'  config {{ name: "{name}" base_path: "{tmp / name}" model_platform: "python" }}\n'
            for name in (PYTHON_MODEL, TRIVIAL_MODEL)
        )
        + "}\n"
    )
    return config


def all_cpus() -> str:
    return f"0-{(os.cpu_count() or 1) - 1}"


def server_command(num_workers: int, config: Path, rest_port: int, grpc_port: int) -> list[str]:
    """The CLI serving ``config`` with ``num_workers`` workers, allowed on every CPU."""
    command = [
        sys.executable,
        "-m",
        "servinglib",
        f"--num_workers={num_workers}",
        f"--model_config_file={config}",
        "--allow_python_code_execution",
        f"--rest_api_port={rest_port}",
        f"--port={grpc_port}",
        "--rest_api_host=127.0.0.1",
        "--grpc_host=127.0.0.1",
        "--enable_metrics",
    ]
    return pinned(command, all_cpus())


def ready_waiter(num_workers: int, log: Path) -> Callable[[subprocess.Popen[bytes]], None]:
    """Waits until the log says every worker (or the one process) serves."""
    ready = "Serving with" if num_workers > 1 else "Serving models"

    def wait(process: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while ready not in log.read_text():
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the server did not start:\n{log.read_text()}")
            time.sleep(0.1)

    return wait


def worker_pids(pid: int) -> list[int]:
    """The worker processes of the supervisor ``pid``."""
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def rest_cell(
    label: str, port: int, model: str, *, concurrency: int, args: argparse.Namespace, tmp: Path
) -> Cell:
    body = tmp / "body.json"
    body.write_bytes(predict_body(X))
    script = tmp / "post.lua"
    script.write_text(WRK_LUA)
    path = f"/v1/models/{model}:predict"
    if args.warmup_seconds > 0:
        wrk(port, path, body, script, concurrency=concurrency, seconds=args.warmup_seconds)
    figures = wrk(port, path, body, script, concurrency=concurrency, seconds=args.seconds)
    errors = sum(int(figures[k]) for k in ("non2xx", "connect", "read", "write", "timeout"))
    return Cell(
        label,
        figures["requests"] / (figures["duration_us"] / 1e6),
        figures["p50"] / 1e3,
        figures["p99"] / 1e3,
        errors,
    )


def grpc_cell(
    label: str, port: int, model: str, *, concurrency: int, args: argparse.Namespace, tmp: Path
) -> Cell:
    body = tmp / "body.bin"
    body.write_bytes(grpc_frame(grpc_bench.predict_request(model).SerializeToString()))
    path = grpc_bench.PREDICT_PATH
    log = tmp / "h2load.log"
    run = functools.partial(
        h2load, port, path, body, concurrency=concurrency, multiplexed=args.multiplexed
    )
    if args.warmup_seconds > 0:
        run(seconds=args.warmup_seconds, log=None)
    succeeded, failed, elapsed = run(seconds=args.seconds, log=log)
    latencies = sorted(
        int(fields[2]) / 1000
        for fields in (line.split("\t") for line in log.read_text().splitlines())
        if len(fields) >= 3 and fields[1] == "200"
    )
    return Cell(
        label,
        succeeded / elapsed,
        percentile(latencies, 0.5),
        percentile(latencies, 0.99),
        failed,
    )


def measure(num_workers: int, config: Path, args: argparse.Namespace, tmp: Path) -> Run:
    rest_port, grpc_port = free_port(), free_port()
    log = tmp / f"server{num_workers}.log"
    command = server_command(num_workers, config, rest_port, grpc_port)
    with running(command, log, ready_waiter(num_workers, log)) as process:
        # taskset execs the server: process.pid is servinglib's own (the supervisor for N > 1).
        supervisor = process.pid if num_workers > 1 else None
        for model in (PYTHON_MODEL, TRIVIAL_MODEL):  # one checked request each
            with urllib.request.urlopen(
                urllib.request.Request(
                    f"http://127.0.0.1:{rest_port}/v1/models/{model}:predict",
                    data=predict_body(X),
                    method="POST",
                ),
                timeout=30,
            ) as reply:
                assert reply.status == 200
        cpu_before = cpu_s(supervisor) if supervisor else None
        started = time.monotonic()
        cells = [
            rest_cell(
                f"REST {PYTHON_MODEL} c16",
                rest_port,
                PYTHON_MODEL,
                concurrency=16,
                args=args,
                tmp=tmp,
            ),
            grpc_cell(
                f"gRPC {PYTHON_MODEL} c16",
                grpc_port,
                PYTHON_MODEL,
                concurrency=16,
                args=args,
                tmp=tmp,
            ),
            rest_cell(
                f"REST {TRIVIAL_MODEL} c64",
                rest_port,
                TRIVIAL_MODEL,
                concurrency=64,
                args=args,
                tmp=tmp,
            ),
        ]
        measured_s = time.monotonic() - started
        cpu_used = cpu_s(supervisor) - cpu_before if supervisor and cpu_before is not None else None
        workers = worker_pids(process.pid) if num_workers > 1 else [process.pid]
        return Run(
            num_workers,
            cells,
            [rss_mb(pid) for pid in workers],
            rss_mb(supervisor) if supervisor else None,
            cpu_used,
            measured_s,
        )


def report(runs: list[Run]) -> None:
    one, two = runs
    print()
    print(f"{INDENT}{'cell':<28}{'N':>3}{'req/s':>10}{'p50 ms':>9}{'p99 ms':>9}{'errors':>8}")
    for run in runs:
        for cell in run.cells:
            print(
                f"{INDENT}{cell.label:<28}{run.num_workers:>3}{cell.rps:>10.0f}"
                f"{cell.p50_ms:>9.2f}{cell.p99_ms:>9.2f}{cell.errors:>8}"
            )
    print()
    print(f"{INDENT}throughput ratio N=2 / N=1")
    for first, second in zip(one.cells, two.cells, strict=True):
        print(f"{INDENT}{first.label:<28}{second.rps / first.rps:>6.2f} x")
    print()
    print(
        f"{INDENT}RSS, MB: N=1 process {one.worker_rss_mb[0]:.0f}; N=2 workers "
        + ", ".join(f"{mb:.0f}" for mb in two.worker_rss_mb)
        + f"; supervisor {two.supervisor_rss_mb or 0:.0f}"
    )
    if two.supervisor_cpu_s is not None:
        share = two.supervisor_cpu_s / two.measured_s * 100
        print(
            f"{INDENT}supervisor CPU over {two.measured_s:.0f} s of load: "
            f"{two.supervisor_cpu_s:.2f} s ({share:.2f} % of one core)"
        )
    print()
    for index in (0, 1):
        ratio = two.cells[index].rps / one.cells[index].rps
        print_target(
            ratio >= SPEEDUP_TARGET,
            f"{two.cells[index].label}: N=2 {ratio:.2f} x N=1 (target >= {SPEEDUP_TARGET} x)",
        )
    if two.supervisor_cpu_s is not None:
        print_target(
            two.supervisor_cpu_s / two.measured_s < 0.01,
            "the supervisor's CPU at steady state < 1 % of one core",
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measured run per cell")
    parser.add_argument("--warmup-seconds", type=float, default=2.0, help="warm-up per cell")
    parser.add_argument(
        "--multiplexed",
        action="store_true",
        help="gRPC: every request a stream of one connection (h2load -c1 -mN)"
        + "; one connection reaches one worker",
    )
    args = parser.parse_args()
    print_environment("bench/workers.py: --num_workers N=1 against N=2, server on every CPU")
    print(f"{INDENT}server CPUs {all_cpus()}; the load generators run where this script runs")
    with tempfile.TemporaryDirectory(prefix="servinglib-bench-workers-") as name:
        tmp = Path(name)
        config = write_models(tmp)
        runs = [measure(n, config, args, tmp) for n in (1, 2)]
    report(runs)


if __name__ == "__main__":
    main()
