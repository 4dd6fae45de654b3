"""Benchmark: the gRPC request path of ``python -m servinglib``, driven by h2load.

The server under test is the CLI (``python -m servinglib``: grpc.aio on a uvloop event loop,
REST on the same loop, metrics on) in a subprocess pinned with ``taskset`` to one CPU, serving
a trivial numpy Python servable (float32 [1,16] -> x + 1) declared twice: ``plus_one`` in the
default ``thread`` execution mode and ``plus_one_inline`` in ``inline`` mode. The load
generator is h2load (Debian's nghttp2-client) on the other CPU, posting a prebuilt
length-prefixed gRPC request body (``content-type: application/grpc``, ``te: trailers``) on
``concurrency`` connections with one request outstanding each, for ``--seconds`` per cell after
a ``--warmup-seconds`` warm-up run. Cells:

1. V2 ``ModelInfer`` with raw input contents, and TF Serving ``Predict`` (typed ``float_val``),
   each on both models, at concurrency 1, 8 and 64;
2. floors, in the same run with the same client: a bare grpc.aio servicer returning a fixed
   response (the V2 response bytes), on uvloop (the CLI's stack: the floor of the targets) and
   on asyncio's own loop, and a bare sync grpc server (thread pool), the fastest floor here.

Before the load, one request of each kind goes through a real grpcio client and its response
is checked (y = x + 1). h2load counts any HTTP 200 as a success, also a non-zero grpc-status,
so the server's ``:tensorflow:serving:request_count`` by status (scraped from its Prometheus
endpoint) is compared with h2load's count.

Figures: req/s, latency percentiles in ms (h2load's per-request log), and ratios to the floors.
Targets (issue 8, at concurrency 8): >= 75 % of the bare grpc.aio servicer's req/s, and
>= 2.6 k req/s (1.5x the best Python peer's 1.7 k). PASS/MISS lines never fail the run.
Run with ``./dev bench grpc`` (see bench/README.md); needs ``h2load``
(``apt-get install nghttp2-client``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from _common import INDENT, percentile, print_environment, print_target
from _servers import (
    LOGGING_RATES,
    TRIVIAL_MODELS,
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

CONCURRENCY = (1, 8, 64)
TARGET_CONCURRENCY = 8
FLOOR_RATIO_TARGET = 0.75
PEER_RPS = 1700.0  # the best Python peer at concurrency 8 (KServe 0.21), measured by the issue
PEER_FACTOR_TARGET = 1.5
START_TIMEOUT_S = 60.0

V2_PATH = "/inference.GRPCInferenceService/ModelInfer"
PREDICT_PATH = "/tensorflow.serving.PredictionService/Predict"
SYNC_FLOOR_WORKERS = 8


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


def grpc_frame(message: bytes) -> bytes:
    """A gRPC length-prefixed message: not compressed, 4-byte big-endian length."""
    return b"\0" + struct.pack(">I", len(message)) + message


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
    if kind == "sync":

        def sync_call(_data: bytes, _context: Any) -> bytes:  # noqa: ANN401 - grpc's context
            return response

        server = grpc.server(concurrent.futures.ThreadPoolExecutor(SYNC_FLOOR_WORKERS))
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

    @property
    def rps(self) -> float:
        return self.succeeded / self.seconds


def h2load(
    port: int, path: str, body: Path, *, concurrency: int, seconds: float, log: Path | None
) -> tuple[int, int, float]:
    """Runs h2load; (succeeded, failed, measured seconds)."""
    command = [
        "h2load",
        f"--clients={concurrency}",
        "--max-concurrent-streams=1",
        "--threads=1",
        f"--duration={seconds:g}",
        f"--data={body}",
        "--header=content-type: application/grpc",
        "--header=te: trailers",
    ]
    if log is not None:
        log.unlink(missing_ok=True)  # h2load appends to it
        command.append(f"--log-file={log}")
    command.append(f"http://127.0.0.1:{port}{path}")
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    match = re.search(r"(\d+) succeeded, (\d+) failed", done.stdout)
    took = re.search(r"finished in ([\d.]+)(m?s)", done.stdout)
    if done.returncode != 0 or match is None or took is None:
        raise RuntimeError(f"h2load failed: {done.stdout}\n{done.stderr}")
    elapsed = float(took.group(1)) / (1000 if took.group(2) == "ms" else 1)
    return int(match.group(1)), int(match.group(2)), elapsed


def measure(
    label: str,
    port: int,
    workload: Workload,
    concurrency: int,
    *,
    args: argparse.Namespace,
    tmp: Path,
    counts: Callable[[], dict[tuple[str, str], float]] | None = None,
) -> Cell:
    """A warm-up run, then the measured one; ``counts`` (by model, status) before and after."""
    body = tmp / "body.bin"
    body.write_bytes(grpc_frame(workload.message))
    log = tmp / "h2load.log"
    h2load(
        port, workload.path, body, concurrency=concurrency, seconds=args.warmup_seconds, log=None
    )
    before = counts() if counts is not None else {}
    succeeded, failed, elapsed = h2load(
        port, workload.path, body, concurrency=concurrency, seconds=args.seconds, log=log
    )
    after = counts() if counts is not None else {}
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
    )


# --------------------------------------------------------------------------- report


def print_table(cells: Sequence[Cell]) -> None:
    width = max(len(c.label) for c in cells) + 2
    heads = ("conc", "req/s", "p50", "p90", "p99", "p99.9", "max", "n", "server OK")
    print(f"{INDENT}{'':<{width}}" + "".join(f"{h:>10}" for h in heads) + "   (latency ms)")
    for cell in cells:
        ordered = sorted(cell.latencies_ms) or [float("nan")]
        figures = [percentile(ordered, q) for q in (0.5, 0.9, 0.99, 0.999)] + [ordered[-1]]
        ok = "-" if cell.server_ok is None else str(cell.server_ok)
        print(
            f"{INDENT}{cell.label:<{width}}{cell.concurrency:>10}{cell.rps:>10.0f}"
            + "".join(f"{f:>10.2f}" for f in figures)
            + f"{cell.succeeded:>10}{ok:>10}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=10, help="measured seconds per cell")
    parser.add_argument("--warmup-seconds", type=int, default=2, help="warm-up seconds per cell")
    parser.add_argument(
        "--concurrency", type=int, nargs="+", default=list(CONCURRENCY), help="connections"
    )
    parser.add_argument(
        "--request-logging",
        action="store_true",
        help="instead: TF Serving Predict (thread) with request logging off, at 0.01 and at 1.0",
    )
    parser.add_argument("--floor", choices=("uvloop", "asyncio", "sync"), help=argparse.SUPPRESS)
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
        "concurrency = h2load connections, one request outstanding on each"
    )
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        if args.request_logging:
            run_logging(args, tmp, server_cpus)
            return
        cells = run_all(args, tmp, server_cpus)
    report(cells, args)


def run_logging(args: argparse.Namespace, tmp: Path, server_cpus: str | None) -> None:
    """One server per logging rate (off, 0.01, 1.0), measured back to back per concurrency."""
    workload = workloads()[1]  # TF Serving Predict, thread
    with contextlib.ExitStack() as stack:
        ports: dict[float | None, int] = {}
        for rate in LOGGING_RATES:
            port = ports[rate] = free_port()
            command = [
                sys.executable, "-m", "servinglib",
                f"--model_config_file={write_trivial_models(tmp, rate)}",
                "--allow_python_code_execution", f"--port={port}", "--grpc_host=127.0.0.1",
                "--enable_metrics",
            ]  # fmt: skip
            log = tmp / f"server-{rate}.log"
            stack.enter_context(
                running(
                    pinned(command, server_cpus),
                    log,
                    functools.partial(wait_for_grpc, port, log=log),
                )
            )
            call_once(port, workload)
        rps: dict[tuple[float | None, int], float] = {}
        for concurrency in args.concurrency:
            for rate, port in ports.items():
                cell = measure(workload.label, port, workload, concurrency, args=args, tmp=tmp)
                rps[rate, concurrency] = cell.rps
    print_logging_ratios(rps, "gRPC TF Serving Predict, thread")


def run_all(args: argparse.Namespace, tmp: Path, server_cpus: str | None) -> list[Cell]:
    cells: list[Cell] = []
    config = write_trivial_models(tmp)
    port, rest_port = free_port(), free_port()
    command = [
        sys.executable,
        "-m",
        "servinglib",
        f"--model_config_file={config}",
        "--allow_python_code_execution",
        f"--port={port}",
        f"--rest_api_port={rest_port}",
        "--rest_api_host=127.0.0.1",
        "--grpc_host=127.0.0.1",
        "--enable_metrics",
    ]
    served = workloads()
    floor = Workload(
        "floor", "", V2_PATH, v2_request(TRIVIAL_MODELS["thread"]).SerializeToString(), v2_check
    )
    with contextlib.ExitStack() as stack:
        # Every server runs from the start (idle ones cost nothing), so that each concurrency's
        # cells and floors are measured back to back and drift hits them alike.
        log = tmp / "server.log"
        stack.enter_context(
            running(pinned(command, server_cpus), log, lambda p: wait_for_grpc(port, p, log))
        )
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
            stack.enter_context(
                running(
                    pinned(floor_command, server_cpus),
                    tmp / f"{kind}.log",
                    functools.partial(wait_for_grpc, floor_ports[kind], log=tmp / f"{kind}.log"),
                )
            )
        bound_port = free_port()
        bound_log = tmp / "bound.log"
        stack.enter_context(
            running(
                pinned(bound_command("_grpc_bound.py", bound_port, config), server_cpus),
                bound_log,
                functools.partial(wait_for_grpc, bound_port, log=bound_log),
            )
        )
        bound = Workload(
            BOUND_LABEL,
            "",
            V2_PATH,
            v2_request(TRIVIAL_MODELS["inline"]).SerializeToString(),
            v2_check,
        )
        print("\n1. One request of each kind through grpcio, checked (y = x + 1):")
        for workload in served:
            call_once(port, workload)
            print(f"{INDENT}{workload.label}: ok")
        for kind, floor_port in floor_ports.items():
            call_once(floor_port, floor)
            print(f"{INDENT}{FLOORS[kind]}: ok (V2 request)")
        call_once(bound_port, bound)
        print(f"{INDENT}{BOUND_LABEL}: ok")
        for concurrency in args.concurrency:
            for workload in served:
                cells.append(
                    measure(
                        workload.label,
                        port,
                        workload,
                        concurrency,
                        args=args,
                        tmp=tmp,
                        counts=lambda: request_counts(rest_port),
                    )
                )
            for kind, floor_port in floor_ports.items():
                cells.append(
                    measure(FLOORS[kind], floor_port, floor, concurrency, args=args, tmp=tmp)
                )
            cells.append(measure(BOUND_LABEL, bound_port, bound, concurrency, args=args, tmp=tmp))
    return cells


BOUND_LABEL = "bound: required steps, flat"

FLOORS = {
    "uvloop": "floor: bare grpc.aio, uvloop",
    "asyncio": "floor: bare grpc.aio, asyncio",
    "sync": f"floor: bare sync grpc, {SYNC_FLOOR_WORKERS} threads",
}


def report(cells: Sequence[Cell], args: argparse.Namespace) -> None:
    print("\n2. req/s and latency (h2load's count; the server's OK count beside it)")
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
            if c.concurrency == concurrency and not c.label.startswith("floor")
        ]
        print(
            f"{INDENT}concurrency {concurrency} (÷ grpc.aio floor / ÷ sync floor): "
            + "; ".join(parts)
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
    concurrency = TARGET_CONCURRENCY
    if concurrency not in args.concurrency:
        print(f"no targets: concurrency {concurrency} was not measured")
        return
    base = by_key[(floor, concurrency)].rps
    best = by_key[(fastest, concurrency)].rps
    bound = by_key.get((BOUND_LABEL, concurrency))
    if bound is not None:
        print(
            f"{INDENT}the ceiling here: the bound (the required steps of an inline V2 ModelInfer "
            f"in one coroutine) does {bound.rps / base:.2f} x the bare grpc.aio servicer"
        )
    for cell in cells:
        if cell.concurrency != concurrency or cell.label.startswith(("floor", "bound")):
            continue
        ratio = cell.rps / base
        print_target(
            ratio >= FLOOR_RATIO_TARGET,
            f"{cell.label}, c{concurrency}: {cell.rps:.0f} req/s = {ratio:.2f} x the bare "
            f"grpc.aio servicer's {base:.0f} (target >= {FLOOR_RATIO_TARGET})",
        )
        print_target(
            cell.rps >= PEER_FACTOR_TARGET * PEER_RPS,
            f"{cell.label}, c{concurrency}: {cell.rps:.0f} req/s = {cell.rps / PEER_RPS:.2f} x the "
            f"best peer's {PEER_RPS:.0f} (target >= {PEER_FACTOR_TARGET})",
        )
        print_target(
            cell.rps / best >= FLOOR_RATIO_TARGET,
            f"{cell.label}, c{concurrency}: {cell.rps / best:.2f} x the bare sync server's "
            f"{best:.0f} (the fastest floor; same target)",
        )


if __name__ == "__main__":
    main()
