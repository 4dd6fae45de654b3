"""Benchmark: the gRPC request path of ``python -m servinglib``, driven by h2load.

The servers under test are the CLI (``python -m servinglib``, metrics on) once per gRPC server
(``--grpc_server=sync``: grpcio's synchronous server, each RPC on one of its worker threads;
``--grpc_server=aio``: grpc.aio on the uvloop event loop REST also runs on), each in a
subprocess pinned with ``taskset`` to one CPU, serving a trivial numpy Python servable (float32
[1,16] -> x + 1) declared twice: ``plus_one`` in the default ``thread`` execution mode and
``plus_one_inline`` in ``inline`` mode. The load generator is h2load (Debian's nghttp2-client)
on the other CPU, posting a prebuilt length-prefixed gRPC request body (``content-type:
application/grpc``, ``te: trailers``) on ``concurrency`` connections with one request
outstanding each, and again with all of them as streams of one connection (``h2load -c1 -mN``,
labelled ``[1 conn]``: how tritonclient, a shared stub or a sidecar call), for ``--seconds``
per cell after a ``--warmup-seconds`` warm-up run. Cells:

1. V2 ``ModelInfer`` with raw input contents, and TF Serving ``Predict`` (typed ``float_val``),
   each on both models, on each server, at concurrency 8 and 64 (``--concurrency``);
2. floors, in the same run with the same client: a bare grpc.aio servicer returning a fixed
   response (the V2 response bytes), on uvloop and on asyncio's own loop, and a bare sync grpc
   server (thread pool) with 8 and with 64 threads; and the bound (``_grpc_bound.py``: the
   required steps of an inline V2 ModelInfer in one grpc.aio coroutine);
3. batching (unless ``--skip-mlp``): a third CLI per server serving the 3 x Dense(256) MLP in
   numpy with ``--enable_batching`` (max 32 rows, 2 ms), V2 ``ModelInfer`` of one row at
   concurrency 64; rows per model call from the server's
   ``:tensorflow:serving:batching_session:input_batch_size`` histogram.

Before the load, one request of each kind goes through a real grpcio client and its response
is checked (y = x + 1). h2load counts any HTTP 200 as a success, also a non-zero grpc-status,
so the server's ``:tensorflow:serving:request_count`` by status (scraped from its Prometheus
endpoint) is compared with h2load's count.

Figures: req/s, latency percentiles in ms (h2load's per-request log), and ratios to the floors.
Targets (issue 19): V2 ``add`` at concurrency 8 >= 4.8 k req/s (2 x the best Python peer's
2.38 k, KServe); batched MLP at 64 >= 8.4 k req/s (2 x PyTriton's 4.2 k) with >= 30 rows per
call. Issue 31: V2 ``add`` at concurrency 8 multiplexed on one connection >= 6.6 k req/s (2 x
KServe's 3.3 k there) and >= 0.9 x the same on 8 connections. PASS/MISS lines never fail the run.
Run with ``./dev bench grpc`` (see bench/README.md); needs ``h2load``
(``apt-get install nghttp2-client``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from _common import INDENT, percentile, print_environment, print_target
from _load import grpc_frame, h2load
from _servers import (
    LOGGING_PASSES,
    LOGGING_RATES,
    NUMPY_MLP_PY,
    TRIVIAL_MODELS,
    best_of_passes,
    bound_command,
    free_port,
    pinned,
    print_logging_ratios,
    request_counts,
    running,
    write_trivial_models,
)

from servinglib.codecs.tensor import from_numpy, to_numpy
from servinglib.protos import grpc_service_pb2, predict_pb2

ROOT = Path(__file__).resolve().parent.parent
HERE = Path(__file__).resolve().parent

CONCURRENCY = (8, 64)
TARGET_CONCURRENCY = 8
FLOOR_RATIO_TARGET = 0.73  # of the bare grpc.aio servicer: what 2 x the peer was there (issue 19)
PEER_RPS = 2380.0  # the best Python peer at concurrency 8 (KServe), measured by issue 19
PEER_FACTOR_TARGET = 2.0
PYTRITON_MLP_RPS = 4200.0  # PyTriton, the numpy MLP batched, concurrency 64 (issue 19)
MLP_ROWS_TARGET = 30.0
MLP_CONCURRENCY = 64
START_TIMEOUT_S = 60.0
SERVERS = ("sync", "aio")
ONE_CONNECTION = " [1 conn]"  # a cell's requests multiplexed as streams of one connection
KSERVE_MUX_RPS = 3300.0  # KServe's gRPC server, h2load -c1 -m8 (issue 31)
MUX_PEER_FACTOR_TARGET = 2.0
MUX_RATIO_TARGET = 0.9  # multiplexed / one stream per connection (issue 31)

V2_PATH = "/inference.GRPCInferenceService/ModelInfer"
PREDICT_PATH = "/tensorflow.serving.PredictionService/Predict"
SYNC_FLOOR_WORKERS = {"sync": 8, "sync64": 64}

MLP = "mlp"
MLP_BATCHING = """
max_batch_size { value: 32 }
batch_timeout_micros { value: 2000 }
max_enqueued_batches { value: 64 }
num_batch_threads { value: 1 }
"""
MLP_X = np.random.default_rng(2).standard_normal((1, 256)).astype(np.float32)


INPUT = np.arange(16, dtype=np.float32).reshape(1, 16)


# --------------------------------------------------------------------------- requests


def v2_request(model: str) -> grpc_service_pb2.ModelInferRequest:
    request = grpc_service_pb2.ModelInferRequest(model_name=model)
    request.inputs.add(name="x", datatype="FP32", shape=INPUT.shape)
    request.raw_input_contents.append(INPUT.tobytes())
    return request


def predict_request(model: str) -> predict_pb2.PredictRequest:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = model
    request.inputs["x"].CopyFrom(from_numpy(INPUT))
    return request


def v2_floor_response() -> bytes:
    """What the server answers a V2 request with: the floors send these bytes."""
    response = grpc_service_pb2.ModelInferResponse(
        model_name=TRIVIAL_MODELS["thread"], model_version="1"
    )
    response.outputs.add(name="y", datatype="FP32", shape=INPUT.shape)
    response.raw_output_contents.append((INPUT + 1).tobytes())
    return response.SerializeToString()


@dataclasses.dataclass(frozen=True)
class Workload:
    """One kind of request: its label, model, RPC path, message and how to check a response."""

    label: str
    model: str
    path: str
    message: bytes
    check: Callable[[bytes], None]


def v2_check(data: bytes) -> None:
    response = grpc_service_pb2.ModelInferResponse.FromString(data)
    y = np.frombuffer(response.raw_output_contents[0], np.float32).reshape(
        response.outputs[0].shape
    )
    if not np.array_equal(y, INPUT + 1):
        raise RuntimeError(f"V2 ModelInfer answered {y}, expected x + 1")


def predict_check(data: bytes) -> None:
    response = predict_pb2.PredictResponse.FromString(data)
    y = to_numpy(response.outputs["y"])
    if not np.array_equal(y, INPUT + 1):
        raise RuntimeError(f"Predict answered {y}, expected x + 1")


def workloads() -> list[Workload]:
    """Every served cell's request, in table order."""
    cells = []
    for mode, model in TRIVIAL_MODELS.items():
        v2 = v2_request(model).SerializeToString()
        predict = predict_request(model).SerializeToString()
        cells.append(Workload(f"V2 raw, {mode}", model, V2_PATH, v2, v2_check))
        cells.append(Workload(f"Predict, {mode}", model, PREDICT_PATH, predict, predict_check))
    return cells


def mlp_workload() -> Workload:
    request = grpc_service_pb2.ModelInferRequest(model_name=MLP)
    request.inputs.add(name="features", datatype="FP32", shape=MLP_X.shape)
    request.raw_input_contents.append(MLP_X.tobytes())

    def check(data: bytes) -> None:
        response = grpc_service_pb2.ModelInferResponse.FromString(data)
        y = np.frombuffer(response.raw_output_contents[0], np.float32)
        if y.shape != (256,) or not np.isfinite(y).all():
            raise RuntimeError(f"the MLP answered {y.shape}, expected 256 finite values")

    return Workload("V2 raw, MLP batched", MLP, V2_PATH, request.SerializeToString(), check)


def write_mlp_model(tmp: Path) -> tuple[Path, Path]:
    """The numpy MLP under ``tmp``: its models.config and batching parameters file."""
    directory = tmp / MLP / "1"
    directory.mkdir(parents=True)
    (directory / "model.py").write_text(NUMPY_MLP_PY)
    config = tmp / "mlp.config"
    config.write_text(
        f'model_config_list {{ config {{ name: "{MLP}" base_path: "{tmp / MLP}" '
        'model_platform: "python" } }\n'
    )
    batching = tmp / "batching.config"
    batching.write_text(MLP_BATCHING)
    return config, batching


_INPUT_BATCH_SIZE = re.compile(
    r"^:tensorflow:serving:batching_session:input_batch_size_(sum|count)(?:\{[^}]*\})? (\S+)$",
    re.MULTILINE,
)


def batch_rows(rest_port: int) -> tuple[float, float]:
    """The server's rows in batches and its batches so far."""
    url = f"http://127.0.0.1:{rest_port}/monitoring/prometheus/metrics"
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    totals = {"sum": 0.0, "count": 0.0}
    for kind, value in _INPUT_BATCH_SIZE.findall(text):
        totals[kind] += float(value)
    return totals["sum"], totals["count"]


# --------------------------------------------------------------------------- servers


def wait_for_grpc(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    import grpc

    deadline = time.monotonic() + START_TIMEOUT_S
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the server exited: {log.read_text()[-2000:]}")
            try:
                grpc.channel_ready_future(channel).result(timeout=0.5)
                return
            except grpc.FutureTimeoutError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"no server on port {port}: {log.read_text()[-2000:]}"
                    ) from None


def call_once(port: int, workload: Workload) -> None:
    """One request through a real grpcio client; raises unless the response checks out."""
    import grpc

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        method = channel.unary_unary(workload.path)
        workload.check(method(workload.message, timeout=10))


def serve_floor(kind: str, port: int) -> None:
    """The bare servers: a fixed response to every RPC, no decoding (``--floor``)."""
    import asyncio
    import concurrent.futures

    import grpc
    import grpc.aio

    response = v2_floor_response()
    paths = {"inference.GRPCInferenceService": "ModelInfer"}
    if kind in SYNC_FLOOR_WORKERS:

        def sync_call(_data: bytes, _context: Any) -> bytes:  # noqa: ANN401 - grpc's context
            return response

        server = grpc.server(concurrent.futures.ThreadPoolExecutor(SYNC_FLOOR_WORKERS[kind]))
        server.add_generic_rpc_handlers(
            [
                grpc.method_handlers_generic_handler(
                    service, {method: grpc.unary_unary_rpc_method_handler(sync_call)}
                )
                for service, method in paths.items()
            ]
        )
        server.add_insecure_port(f"127.0.0.1:{port}")
        server.start()
        signal.signal(signal.SIGTERM, lambda *_: server.stop(0))
        server.wait_for_termination()
        return

    async def aio_call(_data: bytes, _context: Any) -> bytes:  # noqa: ANN401 - grpc's context
        return response

    async def main() -> None:
        server = grpc.aio.server()
        server.add_generic_rpc_handlers(
            [
                grpc.method_handlers_generic_handler(
                    service, {method: grpc.unary_unary_rpc_method_handler(aio_call)}
                )
                for service, method in paths.items()
            ]
        )
        server.add_insecure_port(f"127.0.0.1:{port}")
        await server.start()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, lambda: loop.create_task(server.stop(0)))
        await server.wait_for_termination()

    if kind == "uvloop":
        import uvloop

        uvloop.run(main())
    else:
        asyncio.run(main())


# --------------------------------------------------------------------------- load


@dataclasses.dataclass(frozen=True)
class Cell:
    """One measured cell: h2load's counts and per-request latencies."""

    label: str
    concurrency: int
    seconds: float
    succeeded: int
    failed: int
    latencies_ms: Sequence[float]
    server_ok: int | None = None
    server_other: dict[str, int] = dataclasses.field(default_factory=dict)
    rows_per_call: float | None = None  # batched cells: mean rows per model call
    cpu_us: float = float("nan")  # the server's CPU time per successful request, µs

    @property
    def rps(self) -> float:
        return self.succeeded / self.seconds


def measure(
    label: str,
    port: int,
    workload: Workload,
    concurrency: int,
    *,
    args: argparse.Namespace,
    tmp: Path,
    counts: Callable[[], dict[tuple[str, str], float]] | None = None,
    rows: Callable[[], tuple[float, float]] | None = None,
    multiplexed: bool = False,
) -> Cell:
    """A warm-up run, then the measured one; ``counts`` (by model, status) before and after,
    and ``rows`` (rows batched, batches) to give the mean rows per model call.
    ``multiplexed``: every request on one connection (the label says so)."""
    if multiplexed:
        label += ONE_CONNECTION
    body = tmp / "body.bin"
    body.write_bytes(grpc_frame(workload.message))
    log = tmp / "h2load.log"
    run = functools.partial(
        h2load, port, workload.path, body, concurrency=concurrency, multiplexed=multiplexed
    )
    run(seconds=args.warmup_seconds, log=None)
    before = counts() if counts is not None else {}
    rows_before = rows() if rows is not None else (0.0, 0.0)
    cpu_before = server_cpu_s(port)
    succeeded, failed, elapsed = run(seconds=args.seconds, log=log)
    cpu_s = server_cpu_s(port) - cpu_before
    rows_after = rows() if rows is not None else (0.0, 0.0)
    after = counts() if counts is not None else {}
    batches = rows_after[1] - rows_before[1]
    latencies = []
    for line in log.read_text().splitlines():
        fields = line.split("\t")
        if len(fields) >= 3 and fields[1] == "200":
            latencies.append(int(fields[2]) / 1000)
    delta = {
        status: int(value - before.get((model, status), 0))
        for (model, status), value in after.items()
        if model == workload.model and value != before.get((model, status), 0)
    }
    return Cell(
        label,
        concurrency,
        elapsed,
        succeeded,
        failed,
        latencies,
        delta.pop("OK", 0) if counts is not None else None,
        delta,
        None if rows is None else (rows_after[0] - rows_before[0]) / max(batches, 1.0),
        1e6 * cpu_s / max(succeeded, 1),
    )


SERVER_PIDS: dict[int, int] = {}
"""The process serving each port (filled as servers start): whose CPU time a cell reads."""


def server_cpu_s(port: int) -> float:
    """The CPU time (user + system, all threads) the process serving ``port`` has used so far."""
    fields = Path(f"/proc/{SERVER_PIDS[port]}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# --------------------------------------------------------------------------- report


def print_table(cells: Sequence[Cell]) -> None:
    width = max(len(c.label) for c in cells) + 2
    heads = ("conc", "req/s", "CPU µs", "p50", "p90", "p99", "p99.9", "max", "n", "server OK")
    print(f"{INDENT}{'':<{width}}" + "".join(f"{h:>10}" for h in heads) + "   (latency ms)")
    for cell in cells:
        ordered = sorted(cell.latencies_ms) or [float("nan")]
        figures = [percentile(ordered, q) for q in (0.5, 0.9, 0.99, 0.999)] + [ordered[-1]]
        ok = "-" if cell.server_ok is None else str(cell.server_ok)
        print(
            f"{INDENT}{cell.label:<{width}}{cell.concurrency:>10}{cell.rps:>10.0f}"
            + f"{cell.cpu_us:>10.0f}"
            + "".join(f"{f:>10.2f}" for f in figures)
            + f"{cell.succeeded:>10}{ok:>10}"
            + ("" if cell.rows_per_call is None else f"   {cell.rows_per_call:.1f} rows/call")
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=10, help="measured seconds per cell")
    parser.add_argument("--warmup-seconds", type=int, default=2, help="warm-up seconds per cell")
    parser.add_argument(
        "--concurrency", type=int, nargs="+", default=list(CONCURRENCY), help="connections"
    )
    parser.add_argument(
        "--servers", nargs="+", choices=SERVERS, default=list(SERVERS), help="gRPC servers"
    )
    parser.add_argument("--skip-mlp", action="store_true", help="no batched MLP cells")
    parser.add_argument(
        "--request-logging",
        action="store_true",
        help="instead: TF Serving Predict (thread) with request logging off, at 0.01 and at 1.0",
    )
    parser.add_argument(
        "--floor", choices=("uvloop", "asyncio", *SYNC_FLOOR_WORKERS), help=argparse.SUPPRESS
    )
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    # This file is named grpc.py: with its directory first on sys.path, `import grpc` would
    # import it again instead of grpcio. _common is imported already; drop the directory.
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != HERE]
    if args.floor is not None:
        serve_floor(args.floor, args.port)
        return
    if shutil.which("h2load") is None:
        sys.exit("bench/grpc.py needs h2load: apt-get install nghttp2-client")
    server_cpus = os.environ.get("SERVINGLIB_BENCH_SERVER_CPUS")
    if server_cpus is None and shutil.which("taskset") and len(os.sched_getaffinity(0)) >= 2:
        server_cpus = str(min(os.sched_getaffinity(0)))
    print_environment("bench/grpc.py: the gRPC request path, h2load against python -m servinglib")
    import grpc

    version = subprocess.run(["h2load", "--version"], capture_output=True, text=True, check=False)
    print(
        f"grpcio {grpc.__version__}, {version.stdout.strip()}; "
        f"server on CPU {server_cpus or 'any (not pinned)'}, "
        f"h2load on CPU {os.environ.get('SERVINGLIB_BENCH_CLIENT_CPUS', 'any')}; "
        f"{args.seconds:g} s per cell after {args.warmup_seconds:g} s of warm-up; "
        "concurrency = requests outstanding: one on each of as many connections, or all on "
        f"one ({ONE_CONNECTION.strip()})"
    )
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        if args.request_logging:
            run_logging(args, tmp, server_cpus)
            return
        cells = run_all(args, tmp, server_cpus)
    report(cells, args)


def start_server(
    stack: contextlib.ExitStack,
    log: Path,
    command: list[str],
    port: int,
    server_cpus: str | None,
) -> None:
    """Runs ``command`` pinned to ``server_cpus`` until ``stack`` closes; returns once its gRPC
    port answers.  Its pid is kept for :func:`server_cpu_s`."""
    process = stack.enter_context(
        running(pinned(command, server_cpus), log, functools.partial(wait_for_grpc, port, log=log))
    )
    SERVER_PIDS[port] = process.pid  # taskset execs the server: one process


def run_logging(args: argparse.Namespace, tmp: Path, server_cpus: str | None) -> None:
    """One server per logging rate (off, 0.01, 1.0), measured back to back, best of passes."""
    workload = workloads()[1]  # TF Serving Predict, thread
    with contextlib.ExitStack() as stack:
        ports: dict[float | None, int] = {}
        for rate in LOGGING_RATES:
            port = ports[rate] = free_port()
            config = write_trivial_models(tmp, rate)
            command = cli_command(port, free_port(), config, "sync")
            start_server(stack, tmp / f"server-{rate}.log", command, port, server_cpus)
            call_once(port, workload)

        def measure_rps(port: int, concurrency: int) -> float:
            return measure(workload.label, port, workload, concurrency, args=args, tmp=tmp).rps

        rps = best_of_passes(LOGGING_PASSES, args.concurrency, ports, measure_rps)
    print_logging_ratios(rps, "gRPC TF Serving Predict, thread")


def cli_command(port: int, rest_port: int, config: Path, kind: str, *extra: str) -> list[str]:
    """``python -m servinglib`` serving ``config`` with gRPC server ``kind`` and metrics on."""
    return [
        sys.executable,
        "-m",
        "servinglib",
        f"--model_config_file={config}",
        "--allow_python_code_execution",
        f"--port={port}",
        f"--rest_api_port={rest_port}",
        "--rest_api_host=127.0.0.1",
        "--grpc_host=127.0.0.1",
        f"--grpc_server={kind}",
        "--enable_metrics",
        *extra,
    ]


@dataclasses.dataclass(frozen=True)
class Served:
    """One CLI server under test: its gRPC server kind, ports and what it serves."""

    kind: str
    port: int
    rest_port: int
    workloads: Sequence[Workload]


def measure_served(
    served: Served,
    workload: Workload,
    concurrency: int,
    args: argparse.Namespace,
    tmp: Path,
    *,
    batched: bool = False,
    multiplexed: bool = False,
) -> Cell:
    """A cell of a CLI server: its request counts, and for a batched model its rows per call."""
    return measure(
        f"{served.kind}: {workload.label}",
        served.port,
        workload,
        concurrency,
        args=args,
        tmp=tmp,
        counts=functools.partial(request_counts, served.rest_port),
        rows=functools.partial(batch_rows, served.rest_port) if batched else None,
        multiplexed=multiplexed,
    )


def run_all(args: argparse.Namespace, tmp: Path, server_cpus: str | None) -> list[Cell]:
    cells: list[Cell] = []
    config = write_trivial_models(tmp)
    mlp_config, batching = write_mlp_model(tmp)
    floor = Workload(
        "floor", "", V2_PATH, v2_request(TRIVIAL_MODELS["thread"]).SerializeToString(), v2_check
    )
    with contextlib.ExitStack() as stack:
        # Every server runs from the start (idle ones cost nothing), so that each concurrency's
        # cells and floors are measured back to back and drift hits them alike.

        def start(name: str, command: list[str], port: int) -> None:
            start_server(stack, tmp / f"{name}.log", command, port, server_cpus)

        servers: list[Served] = []
        mlp_servers: list[Served] = []
        for kind in args.servers:
            port, rest_port = free_port(), free_port()
            start(f"server-{kind}", cli_command(port, rest_port, config, kind), port)
            servers.append(Served(kind, port, rest_port, workloads()))
            if not args.skip_mlp:
                port, rest_port = free_port(), free_port()
                extra = ("--enable_batching", f"--batching_parameters_file={batching}")
                start(f"mlp-{kind}", cli_command(port, rest_port, mlp_config, kind, *extra), port)
                mlp_servers.append(Served(kind, port, rest_port, [mlp_workload()]))
        floor_ports = {}
        for kind in FLOORS:
            floor_ports[kind] = free_port()
            floor_command = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--floor",
                kind,
                f"--port={floor_ports[kind]}",
            ]
            start(kind, floor_command, floor_ports[kind])
        bound_port = free_port()
        start("bound", bound_command("_grpc_bound.py", bound_port, config), bound_port)
        bound = Workload(
            BOUND_LABEL,
            "",
            V2_PATH,
            v2_request(TRIVIAL_MODELS["inline"]).SerializeToString(),
            v2_check,
        )
        print("\n1. One request of each kind through grpcio, checked (y = x + 1):")
        for served in servers + mlp_servers:
            for workload in served.workloads:
                call_once(served.port, workload)
                print(f"{INDENT}{served.kind}: {workload.label}: ok")
        for kind, floor_port in floor_ports.items():
            call_once(floor_port, floor)
            print(f"{INDENT}{FLOORS[kind]}: ok (V2 request)")
        call_once(bound_port, bound)
        print(f"{INDENT}{BOUND_LABEL}: ok")
        for concurrency, multiplexed in itertools.product(args.concurrency, (False, True)):
            for served in servers:
                for workload in served.workloads:
                    cells.append(
                        measure_served(
                            served, workload, concurrency, args, tmp, multiplexed=multiplexed
                        )
                    )
            for kind, floor_port in floor_ports.items():
                cells.append(
                    measure(
                        FLOORS[kind],
                        floor_port,
                        floor,
                        concurrency,
                        args=args,
                        tmp=tmp,
                        multiplexed=multiplexed,
                    )
                )
            if not multiplexed:
                cells.append(
                    measure(BOUND_LABEL, bound_port, bound, concurrency, args=args, tmp=tmp)
                )
        for served in mlp_servers:
            cells.append(
                measure_served(
                    served, served.workloads[0], MLP_CONCURRENCY, args, tmp, batched=True
                )
            )
    return cells


BOUND_LABEL = "bound: required steps, flat"

FLOORS = {
    "uvloop": "floor: bare grpc.aio, uvloop",
    "asyncio": "floor: bare grpc.aio, asyncio",
    **{
        kind: f"floor: bare sync grpc, {workers} threads"
        for kind, workers in SYNC_FLOOR_WORKERS.items()
    },
}


def report(cells: Sequence[Cell], args: argparse.Namespace) -> None:
    print(
        "\n2. req/s, the server's CPU time per request (user + system, all its threads; the "
        "figure other load on the machine moves least) and latency (h2load's count; the "
        "server's OK count beside it)"
    )
    print_table(cells)
    by_key = {(c.label, c.concurrency): c for c in cells}
    floor = FLOORS["uvloop"]
    fastest = FLOORS["sync"]
    print("\n3. Ratios to the floors (req/s), same run")
    for concurrency in args.concurrency:
        base = by_key[(floor, concurrency)].rps
        best = by_key[(fastest, concurrency)].rps
        parts = [
            f"{c.label} {c.rps / base:.2f} / {c.rps / best:.2f}"
            for c in cells
            if c.concurrency == concurrency
            and not c.label.startswith("floor")
            and c.rows_per_call is None
        ]
        print(
            f"{INDENT}concurrency {concurrency} (÷ grpc.aio floor / ÷ sync floor, 8 threads): "
            + "; ".join(parts)
        )
    if set(SERVERS) <= set(args.servers):
        for concurrency in args.concurrency:
            parts = []
            for workload in workloads():
                sync = by_key[f"sync: {workload.label}", concurrency]
                aio = by_key[f"aio: {workload.label}", concurrency]
                parts.append(
                    f"{workload.label} {sync.rps / aio.rps:.2f} / {aio.cpu_us / sync.cpu_us:.2f}"
                )
            print(
                f"{INDENT}sync server ÷ aio server (req/s / requests per CPU second), "
                f"concurrency {concurrency}: " + "; ".join(parts)
            )
        sync, aio = (by_key.get((f"{k}: {mlp_workload().label}", MLP_CONCURRENCY)) for k in SERVERS)
        if sync is not None and aio is not None:
            print(
                f"{INDENT}sync server ÷ aio server, batched MLP, concurrency {MLP_CONCURRENCY}: "
                f"{sync.rps / aio.rps:.2f} / {aio.cpu_us / sync.cpu_us:.2f}"
            )
    print("\n4. Cross-check: h2load successes against the server's count by status")
    for cell in cells:
        if cell.server_ok is None:
            continue
        others = ", ".join(f"{k} {v}" for k, v in sorted(cell.server_other.items())) or "none"
        gap = cell.succeeded - cell.server_ok
        print(
            f"{INDENT}{cell.label} c{cell.concurrency}: h2load {cell.succeeded} succeeded "
            f"({cell.failed} failed), server OK {cell.server_ok} (gap {gap}); "
            f"other statuses: {others}"
        )
    print()
    print_targets(cells, args)


def print_targets(cells: Sequence[Cell], args: argparse.Namespace) -> None:
    by_key = {(c.label, c.concurrency): c for c in cells}
    floor = FLOORS["uvloop"]
    concurrency = TARGET_CONCURRENCY
    if concurrency not in args.concurrency:
        print(f"no add targets: concurrency {concurrency} was not measured")
    else:
        base = by_key[(floor, concurrency)].rps
        bound = by_key.get((BOUND_LABEL, concurrency))
        if bound is not None:
            print(
                f"{INDENT}the bound (the required steps of an inline V2 ModelInfer in one "
                f"grpc.aio coroutine) does {bound.rps / base:.2f} x the bare grpc.aio servicer"
            )
        for cell in cells:
            if cell.concurrency != concurrency or not cell.label.endswith(
                ("V2 raw, thread", "V2 raw, inline")
            ):
                continue
            if cell.label.endswith(ONE_CONNECTION):
                continue
            print_target(
                cell.rps >= PEER_FACTOR_TARGET * PEER_RPS,
                f"{cell.label}, c{concurrency}: {cell.rps:.0f} req/s = "
                f"{cell.rps / PEER_RPS:.2f} x the best peer's {PEER_RPS:.0f} "
                f"(target >= {PEER_FACTOR_TARGET}); {cell.rps / base:.2f} x the bare grpc.aio "
                f"servicer's {base:.0f} (>= {FLOOR_RATIO_TARGET} is the same target there)",
            )
        for cell in cells:
            apart = by_key.get((cell.label.removesuffix(ONE_CONNECTION), concurrency))
            if not cell.label.endswith(ONE_CONNECTION) or apart is None or cell.concurrency != 8:
                continue
            if not cell.label.startswith(("sync: V2 raw", "aio: V2 raw")):
                continue
            print_target(
                cell.rps >= MUX_PEER_FACTOR_TARGET * KSERVE_MUX_RPS
                and cell.rps >= MUX_RATIO_TARGET * apart.rps,
                f"{cell.label}, c{concurrency}: {cell.rps:.0f} req/s = "
                f"{cell.rps / KSERVE_MUX_RPS:.2f} x KServe's {KSERVE_MUX_RPS:.0f} multiplexed "
                f"(target >= {MUX_PEER_FACTOR_TARGET}); {cell.rps / apart.rps:.2f} x the same on "
                f"{concurrency} connections (target >= {MUX_RATIO_TARGET})",
            )
    for cell in cells:
        if cell.rows_per_call is None:
            continue
        print_target(
            cell.rps >= 2 * PYTRITON_MLP_RPS and cell.rows_per_call >= MLP_ROWS_TARGET,
            f"{cell.label}, c{cell.concurrency}: {cell.rps:.0f} req/s = "
            f"{cell.rps / PYTRITON_MLP_RPS:.2f} x PyTriton's {PYTRITON_MLP_RPS:.0f} (target >= 2), "
            f"{cell.rows_per_call:.1f} rows per model call (target >= {MLP_ROWS_TARGET:.0f})",
        )


if __name__ == "__main__":
    main()
