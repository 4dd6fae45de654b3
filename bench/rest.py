"""Benchmark: the REST request path of ``python -m servinglib``, driven by wrk.

The server under test is the CLI (``python -m servinglib``: uvicorn's listener with our httptools
connections on a uvloop event loop, metrics on) in a subprocess pinned with ``taskset`` to one
CPU, serving a trivial numpy Python servable (float32 [1,16] -> x + 1) declared twice:
``plus_one`` in the default ``thread`` execution mode and ``plus_one_inline`` in ``inline`` mode.
The load generator is wrk on the other CPU (one thread), posting a prebuilt JSON body (a small Lua
script sets method, body and content type, and prints wrk's latency histogram and error counts) on
``concurrency`` connections with one request outstanding each, for ``--seconds`` per cell after a
``--warmup-seconds`` warm-up run. Cells:

1. TF Serving ``:predict`` (row format, ``instances``) and KServe V2 ``/infer`` (JSON ``data``),
   each on both models, at concurrency 1, 8 and 64;
2. the 3 x Dense(256) Keras SavedModel (``loaders_call.build_keras_mlp``) served by a second
   server started with ``--enable_batching`` (max_batch_size 64, batch_timeout 1 ms, one batch
   thread), both protocols, at concurrency 64 (needs TensorFlow and Keras; skipped without);
3. the floor, in the same run with the same client: a bare ASGI handler served by the same
   stack (``RestServer``: uvicorn's listener, our httptools connections, uvloop) that reads
   the body and answers a fixed JSON response (the predict response's bytes).

Before the load, one request of each kind goes through ``urllib`` and its response is checked
(y = x + 1). wrk counts every response; its non-2xx count and socket errors must be 0, and the
server's ``:tensorflow:serving:request_count`` (scraped from its Prometheus endpoint) is
printed beside wrk's count.

Figures: req/s, latency percentiles in ms (wrk's histogram), and ratios to the floor.
Targets (issue 7, at concurrency 8): ``inline`` >= 60 % of the floor's req/s, ``thread`` >= 40 %,
both >= 8.7 k req/s (3 x the best Python peer's 2.9 k), p99 <= 2 x the floor's p99; with
batching at concurrency 64, >= 5 k req/s (2 x PyTriton's 2.5 k). PASS/MISS lines never fail the
run. Run with ``./dev bench rest`` (see bench/README.md); needs ``wrk`` (``apt-get install
wrk``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
from _common import INDENT, print_environment, print_target
from _load import WRK_LUA, wrk
from _servers import (
    LOGGING_PASSES,
    LOGGING_RATES,
    TRIVIAL_MODELS,
    best_of_passes,
    bound_command,
    free_port,
    pinned,
    print_logging_ratios,
    request_counts,
    request_log_counts,
    running,
    write_trivial_models,
)

ROOT = Path(__file__).resolve().parent.parent

CONCURRENCY = (1, 8, 64)
TARGET_CONCURRENCY = 8
BATCHING_CONCURRENCY = 64
INLINE_FLOOR_RATIO = 0.60
THREAD_FLOOR_RATIO = 0.40
PEER_RPS = 2900.0  # the best Python peer at concurrency 8 (KServe 0.21 V1 REST), from the issue
PEER_FACTOR = 3.0
PYTRITON_BATCHING_RPS = 2500.0  # PyTriton, 3 x Dense(256), dynamic batching, concurrency 64
PYTRITON_FACTOR = 2.0
P99_FACTOR = 2.0
START_TIMEOUT_S = 120.0  # the batching server imports TensorFlow

MLP = "mlp"
FLOOR_LABEL = "floor: bare ASGI handler"
BOUND_LABELS = {mode: f"bound: required steps, flat, {mode}" for mode in TRIVIAL_MODELS}


BATCHING_PARAMETERS = """
max_batch_size { value: 64 }
batch_timeout_micros { value: 1000 }
max_enqueued_batches { value: 64 }
num_batch_threads { value: 1 }
"""

X = np.arange(16, dtype=np.float32).reshape(1, 16)
MLP_X = np.linspace(-1, 1, 256, dtype=np.float32).reshape(1, 256)


# --------------------------------------------------------------------------- requests


@dataclasses.dataclass(frozen=True)
class Workload:
    """One kind of request: its label, model (for the server's counts), path, body and check."""

    label: str
    model: str
    path: str
    body: bytes
    check: Callable[[Any], None]


def predict_body(x: np.ndarray) -> bytes:
    return json.dumps({"instances": x.tolist()}).encode()


def infer_body(name: str, x: np.ndarray) -> bytes:
    tensor = {"name": name, "shape": list(x.shape), "datatype": "FP32", "data": x.ravel().tolist()}
    return json.dumps({"inputs": [tensor]}).encode()


def check_predict(reply: Any) -> None:  # noqa: ANN401 - a JSON value
    if not np.array_equal(np.asarray(reply["predictions"], np.float32), X + 1):
        raise RuntimeError(f":predict answered {reply}, expected x + 1")


def check_infer(reply: Any) -> None:  # noqa: ANN401 - a JSON value
    y = np.asarray(reply["outputs"][0]["data"], np.float32).reshape(X.shape)
    if not np.array_equal(y, X + 1):
        raise RuntimeError(f"/infer answered {reply}, expected x + 1")


def check_mlp(reply: Any) -> None:  # noqa: ANN401 - a JSON value
    if "predictions" in reply:
        shape = np.asarray(reply["predictions"]).shape
    else:
        shape = tuple(reply["outputs"][0]["shape"])
    if shape != (1, 256):
        raise RuntimeError(f"the MLP answered shape {shape}, expected (1, 256)")


def trivial_workloads() -> list[Workload]:
    cells = []
    for mode, model in TRIVIAL_MODELS.items():
        cells.append(
            Workload(
                f"TFS :predict, {mode}",
                model,
                f"/v1/models/{model}:predict",
                predict_body(X),
                check_predict,
            )
        )
        cells.append(
            Workload(
                f"V2 /infer, {mode}",
                model,
                f"/v2/models/{model}/infer",
                infer_body("x", X),
                check_infer,
            )
        )
    return cells


def mlp_workloads() -> list[Workload]:
    return [
        Workload(
            "MLP TFS :predict, batching",
            MLP,
            f"/v1/models/{MLP}:predict",
            predict_body(MLP_X),
            check_mlp,
        ),
        Workload(
            "MLP V2 /infer, batching",
            MLP,
            f"/v2/models/{MLP}/infer",
            infer_body("features", MLP_X),
            check_mlp,
        ),
    ]


def floor_workload() -> Workload:
    return Workload(FLOOR_LABEL, "", "/v1/models/floor:predict", predict_body(X), check_predict)


def bound_workloads() -> list[Workload]:
    return [
        Workload(
            label, "", f"/v1/models/{TRIVIAL_MODELS[mode]}:predict", predict_body(X), check_predict
        )
        for mode, label in BOUND_LABELS.items()
    ]


def floor_response() -> bytes:
    """What the server answers the predict request with: the floor sends these bytes."""
    return json.dumps({"predictions": (X + 1).tolist()}, separators=(",", ":")).encode()


# --------------------------------------------------------------------------- servers


def post(port: int, path: str, body: bytes) -> Any:  # noqa: ANN401 - a JSON value
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        return json.loads(reply.read())


def running_http(
    command: list[str], port: int, log: Path, probe: str
) -> contextlib.AbstractContextManager[subprocess.Popen[bytes]]:
    """Runs ``command`` (see _servers.running) until GET ``probe`` on ``port`` answers."""

    def wait_ready(process: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"the server exited: {log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}{probe}", timeout=1):
                    return
            except (urllib.error.URLError, OSError):
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"no server on port {port}: {log.read_text()[-2000:]}"
                    ) from None
                time.sleep(0.1)

    return running(command, log, wait_ready)


def serve_floor(port: int) -> None:
    """The bare server (``--floor``): RestServer (the CLI's stack) with a fixed-answer app."""
    import asyncio

    from servinglib.server.rest import RestServer

    server = RestServer(_floor_app(), "127.0.0.1", port)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, server.stop)
        await server.serve()

    import uvloop

    uvloop.run(main())


def write_mlp(tmp: Path) -> tuple[Path, Path] | None:
    """The MLP's model config and batching parameters file; None without TensorFlow/Keras."""
    try:
        from loaders_call import build_keras_mlp
    except ImportError as error:
        print(f"{INDENT}(the MLP cells are skipped: {error})")
        return None
    build_keras_mlp(str(tmp / MLP / "1"))
    config = tmp / "mlp.config"
    config.write_text(
        "model_config_list {\n"
        f'  config {{ name: "{MLP}" base_path: "{tmp / MLP}" model_platform: "tensorflow" }}\n'
        "}\n"
    )
    parameters = tmp / "batching.pbtxt"
    parameters.write_text(BATCHING_PARAMETERS)
    return config, parameters


# --------------------------------------------------------------------------- load


@dataclasses.dataclass(frozen=True)
class Cell:
    """One measured cell: wrk's counts and latency percentiles (ms)."""

    label: str
    concurrency: int
    seconds: float
    requests: int
    non2xx: int
    socket_errors: int
    latency_ms: dict[str, float]
    server_ok: int | None = None
    server_other: dict[str, int] = dataclasses.field(default_factory=dict)

    @property
    def rps(self) -> float:
        return self.requests / self.seconds


def measure(
    port: int,
    workload: Workload,
    concurrency: int,
    *,
    args: argparse.Namespace,
    tmp: Path,
    counts: Callable[[], dict[tuple[str, str], float]] | None = None,
) -> Cell:
    """A warm-up run, then the measured one; ``counts`` (by model, status) before and after."""
    body = tmp / "body.json"
    body.write_bytes(workload.body)
    script = tmp / "post.lua"
    script.write_text(WRK_LUA)
    if args.warmup_seconds > 0:
        wrk(
            port,
            workload.path,
            body,
            script,
            concurrency=concurrency,
            seconds=args.warmup_seconds,
        )
    before = counts() if counts is not None else {}
    figures = wrk(port, workload.path, body, script, concurrency=concurrency, seconds=args.seconds)
    after = counts() if counts is not None else {}
    delta = {
        status: int(value - before.get((model, status), 0))
        for (model, status), value in after.items()
        if model == workload.model and value != before.get((model, status), 0)
    }
    return Cell(
        workload.label,
        concurrency,
        figures["duration_us"] / 1e6,
        int(figures["requests"]),
        int(figures["non2xx"]),
        int(sum(figures[k] for k in ("connect", "read", "write", "timeout"))),
        {k: figures[k] / 1e3 for k in ("p50", "p90", "p99", "p99.9", "max")},
        delta.pop("OK", 0) if counts is not None else None,
        delta,
    )


def cli_command(port: int, *flags: str) -> list[str]:
    """``python -m servinglib`` serving REST only on ``port``, metrics on, with ``flags``."""
    return [
        sys.executable,
        "-m",
        "servinglib",
        "--allow_python_code_execution",
        "--port=0",
        f"--rest_api_port={port}",
        "--rest_api_host=127.0.0.1",
        "--enable_metrics",
        *flags,
    ]


def run_all(args: argparse.Namespace, tmp: Path, server_cpus: str | None) -> list[Cell]:
    """Starts every server, checks one request of each kind, then measures.

    All servers are up from the start (idle ones cost nothing), and at each concurrency the
    floor is measured right before the cells it is compared with, so that noise drifting over
    the run hits both alike.
    """
    print("\n1. One request of each kind through urllib, checked:")
    with contextlib.ExitStack() as stack:
        served: list[tuple[int, Workload, bool]] = []  # (port, workload, counted by the server)
        port = free_port()
        server = cli_command(port, f"--model_config_file={write_trivial_models(tmp)}")
        probe = f"/v1/models/{TRIVIAL_MODELS['thread']}"
        stack.enter_context(
            running_http(pinned(server, server_cpus), port, tmp / "server.log", probe)
        )
        served += [(port, workload, True) for workload in trivial_workloads()]
        floor_port = free_port()
        floor = [sys.executable, str(Path(__file__).resolve()), "--floor", f"--port={floor_port}"]
        stack.enter_context(
            running_http(pinned(floor, server_cpus), floor_port, tmp / "floor.log", "/")
        )
        served.append((floor_port, floor_workload(), False))
        bound_port = free_port()
        bound = bound_command("_rest_bound.py", bound_port, tmp / "models.config")
        stack.enter_context(
            running_http(pinned(bound, server_cpus), bound_port, tmp / "bound.log", "/")
        )
        served[:0] = [(bound_port, workload, False) for workload in bound_workloads()]
        mlp = None if args.skip_mlp else write_mlp(tmp)
        if mlp is not None:
            mlp_port = free_port()
            server = cli_command(
                mlp_port,
                f"--model_config_file={mlp[0]}",
                "--enable_batching",
                f"--batching_parameters_file={mlp[1]}",
            )
            log, probe = tmp / "mlp.log", f"/v1/models/{MLP}"
            stack.enter_context(running_http(pinned(server, server_cpus), mlp_port, log, probe))
        checked = [(port, workload) for port, workload, _ in served]
        if mlp is not None:
            checked += [(mlp_port, workload) for workload in mlp_workloads()]
        for port, workload in checked:
            workload.check(post(port, workload.path, workload.body))
            print(f"{INDENT}{workload.label}: ok")
        cells = []
        for concurrency in args.concurrency:
            for port, workload, counted in [served[-1], *served[:-1]]:  # the floor first
                counts = functools.partial(request_counts, port) if counted else None
                cells.append(
                    measure(port, workload, concurrency, args=args, tmp=tmp, counts=counts)
                )
        if mlp is not None:
            for workload in mlp_workloads():
                counts = functools.partial(request_counts, mlp_port)
                cells.append(
                    measure(
                        mlp_port, workload, BATCHING_CONCURRENCY, args=args, tmp=tmp, counts=counts
                    )
                )
    order = [w.label for _, w, _ in served] + [w.label for w in mlp_workloads()]
    return sorted(cells, key=lambda c: (order.index(c.label), c.concurrency))


# --------------------------------------------------------------------------- profile


def profile(args: argparse.Namespace) -> None:
    """``--profile``: the app driven in-process (no sockets), µs per request, and a cProfile.

    The app is built as the CLI builds it (metrics observer and endpoint included) and called
    with a scope like the one the REST server's connections make, one request at a time on a
    uvloop event loop: the Python work of the request path without the HTTP server's own.
    """
    import cProfile
    import pstats

    import uvloop

    from servinglib.loaders.python import PythonPlatformConfig
    from servinglib.server import (
        ServerCore,
        ServerCoreOptions,
        read_model_server_config,
        record_request,
    )
    from servinglib.server.observe.metrics import ServerMetrics
    from servinglib.server.rest import create_app
    from servinglib.server.rest.metrics_endpoint import MetricsEndpoint

    print("\n1. In-process: the app called directly, one request at a time (CPU µs per request)")
    with tempfile.TemporaryDirectory() as name:
        config = read_model_server_config(write_trivial_models(Path(name)))
        options = ServerCoreOptions(
            platform_configs={"python": PythonPlatformConfig(allow_code_execution=True)}
        )
        with ServerCore(config, options) as core:
            metrics = ServerMetrics()
            rest = create_app(core, on_request=record_request(metrics))
            app = MetricsEndpoint(rest, metrics)
            try:
                uvloop.run(_profile_all(app, args.profile_requests, cProfile, pstats))
            finally:
                rest.close()


async def _profile_all(app: Any, count: int, c_profile: Any, pstats: Any) -> None:  # noqa: ANN401
    workloads = [*trivial_workloads(), floor_workload()]
    floor_app = _floor_app()
    for workload in workloads:
        target = floor_app if workload.label == FLOOR_LABEL else app
        await _drive(target, workload, count // 10)  # warm-up
        best = min([await _drive(target, workload, count // 5) for _ in range(5)])
        print(f"{INDENT}{workload.label:<28}{best * 1e6:>8.1f}")
    for workload in workloads[:-1]:
        profiler = c_profile.Profile()
        profiler.enable()
        await _drive(app, workload, count)
        profiler.disable()
        print(f"\n{workload.label}: cProfile of {count} requests")
        pstats.Stats(profiler).sort_stats("tottime").print_stats(18)


def _floor_app() -> Callable[..., Any]:
    body = floor_response()
    start = {
        "type": "http.response.start",
        "status": 200,
        "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
        ],
    }
    end = {"type": "http.response.body", "body": body}

    async def app(scope: Any, receive: Any, send: Any) -> None:  # noqa: ANN401 - ASGI
        if scope["type"] != "http":
            return
        message = await receive()
        while message.get("more_body"):
            message = await receive()
        await send(start)
        await send(end)

    return app


async def _drive(app: Any, workload: Workload, count: int) -> float:  # noqa: ANN401 - ASGI
    """CPU seconds per request of ``count`` sequential requests of ``workload`` through ``app``.

    The process's CPU time (all threads, so a worker pool's share counts), not wall time: other
    processes on a shared machine do not move it.
    """
    path = workload.path
    headers = [
        (b"host", b"127.0.0.1"),
        (b"content-type", b"application/json"),
        (b"content-length", str(len(workload.body)).encode()),
    ]
    message = {"type": "http.request", "body": workload.body, "more_body": False}
    statuses: list[int] = []

    async def receive() -> dict[str, Any]:
        return message

    async def send(event: dict[str, Any]) -> None:
        if event["type"] == "http.response.start":
            statuses.append(event["status"])

    started = time.process_time()
    for _ in range(count):
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "server": ("127.0.0.1", 8501),
            "client": ("127.0.0.1", 40000),
            "scheme": "http",
            "method": "POST",
            "root_path": "",
            "path": path,
            "raw_path": path.encode(),
            "query_string": b"",
            "headers": headers,
            "state": {},
        }
        await app(scope, receive, send)
    took = (time.process_time() - started) / count
    if set(statuses) != {200}:
        raise RuntimeError(f"{workload.label}: statuses {sorted(set(statuses))}")
    return took


# --------------------------------------------------------------------------- report


def print_table(cells: Sequence[Cell]) -> None:
    width = max(len(c.label) for c in cells) + 2
    heads = ("conc", "req/s", "p50", "p90", "p99", "p99.9", "max", "n", "non-2xx", "server OK")
    print(f"{INDENT}{'':<{width}}" + "".join(f"{h:>10}" for h in heads) + "   (latency ms)")
    for cell in cells:
        ok = "-" if cell.server_ok is None else str(cell.server_ok)
        print(
            f"{INDENT}{cell.label:<{width}}{cell.concurrency:>10}{cell.rps:>10.0f}"
            + "".join(f"{cell.latency_ms[k]:>10.2f}" for k in ("p50", "p90", "p99", "p99.9"))
            + f"{cell.latency_ms['max']:>10.1f}"
            + f"{cell.requests:>10}{cell.non2xx:>10}{ok:>10}"
        )


def report(cells: Sequence[Cell], args: argparse.Namespace) -> None:
    print("\n2. req/s and latency (wrk; the server's OK count beside it)")
    print_table(cells)
    by_key = {(c.label, c.concurrency): c for c in cells}
    served = [c for c in cells if c.label != FLOOR_LABEL]  # the bound's ratio is printed too
    print("\n3. Ratios to the floor (req/s; p99), same run")
    for concurrency in args.concurrency:
        floor = by_key[(FLOOR_LABEL, concurrency)]
        p99 = floor.latency_ms["p99"]
        parts = [
            f"{c.label} {c.rps / floor.rps:.2f}; {c.latency_ms['p99'] / p99:.2f}"
            for c in served
            if c.concurrency == concurrency and not c.label.startswith("MLP")
        ]
        print(f"{INDENT}concurrency {concurrency}: " + " | ".join(parts))
    print("\n4. Errors: wrk's non-2xx and socket errors; the server's other statuses")
    for cell in cells:
        others = ", ".join(f"{k} {v}" for k, v in sorted(cell.server_other.items())) or "none"
        gap = "-" if cell.server_ok is None else str(cell.requests - cell.server_ok)
        print(
            f"{INDENT}{cell.label} c{cell.concurrency}: {cell.non2xx} non-2xx, "
            f"{cell.socket_errors} socket errors; server OK gap {gap} (requests cut off by "
            f"wrk's stop), other statuses: {others}"
        )
    print()
    errors = sum(c.non2xx + c.socket_errors for c in cells)
    print_target(errors == 0, f"no errors: {errors} non-2xx responses or socket errors in all")
    concurrency = TARGET_CONCURRENCY
    if (FLOOR_LABEL, concurrency) not in by_key:
        print(f"no floor targets: concurrency {concurrency} was not measured")
    else:
        floor = by_key[(FLOOR_LABEL, concurrency)]
        for mode, label in BOUND_LABELS.items():
            bound = by_key.get((label, concurrency))
            if bound is not None:
                print(
                    f"{INDENT}the ceiling here for {mode}: the bound (the required steps of a "
                    f"predict in one function) does {bound.rps / floor.rps:.2f} x the bare handler"
                )
        for cell in served:
            if cell.concurrency != concurrency or cell.label.startswith("bound"):
                continue
            want = INLINE_FLOOR_RATIO if cell.label.endswith("inline") else THREAD_FLOOR_RATIO
            ratio = cell.rps / floor.rps
            print_target(
                ratio >= want,
                f"{cell.label}, c{concurrency}: {cell.rps:.0f} req/s = {ratio:.2f} x the bare "
                f"handler's {floor.rps:.0f} (target >= {want})",
            )
            print_target(
                cell.rps >= PEER_FACTOR * PEER_RPS,
                f"{cell.label}, c{concurrency}: {cell.rps:.0f} req/s = "
                f"{cell.rps / PEER_RPS:.1f} x the best peer's {PEER_RPS:.0f} "
                f"(target >= {PEER_FACTOR:g} x)",
            )
            p99, floor_p99 = cell.latency_ms["p99"], floor.latency_ms["p99"]
            print_target(
                p99 <= P99_FACTOR * floor_p99,
                f"{cell.label}, c{concurrency}: p99 {p99:.2f} ms = {p99 / floor_p99:.2f} x the "
                f"bare handler's {floor_p99:.2f} ms (target <= {P99_FACTOR:g} x)",
            )
    for cell in cells:
        if cell.label.startswith("MLP"):
            print_target(
                cell.rps >= PYTRITON_FACTOR * PYTRITON_BATCHING_RPS,
                f"{cell.label}, c{cell.concurrency}: {cell.rps:.0f} req/s = "
                f"{cell.rps / PYTRITON_BATCHING_RPS:.1f} x PyTriton's "
                f"{PYTRITON_BATCHING_RPS:.0f} (target >= {PYTRITON_FACTOR:g} x)",
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measured seconds per cell")
    parser.add_argument("--warmup-seconds", type=float, default=2.0, help="warm-up per cell")
    parser.add_argument(
        "--concurrency", type=int, nargs="+", default=list(CONCURRENCY), help="connections"
    )
    parser.add_argument("--skip-mlp", action="store_true", help="leave out the batching cells")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="instead of the load: the app in-process, µs per request and a cProfile",
    )
    parser.add_argument(
        "--profile-requests", type=int, default=20000, help="requests per profiled workload"
    )
    parser.add_argument(
        "--request-logging",
        action="store_true",
        help="instead: TFS :predict (thread) with request logging off, at 0.01 and at 1.0",
    )
    parser.add_argument("--floor", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.floor:
        serve_floor(args.port)
        return
    if args.profile:
        print_environment("bench/rest.py --profile: the REST app in-process")
        profile(args)
        return
    if shutil.which("wrk") is None:
        sys.exit("bench/rest.py needs wrk: apt-get install wrk")
    server_cpus = os.environ.get("SERVINGLIB_BENCH_SERVER_CPUS")
    if server_cpus is None and shutil.which("taskset") and len(os.sched_getaffinity(0)) >= 2:
        server_cpus = str(min(os.sched_getaffinity(0)))
    print_environment("bench/rest.py: the REST request path, wrk against python -m servinglib")
    import uvicorn

    version = subprocess.run(["wrk", "--version"], capture_output=True, text=True, check=False)
    wrk_version = (version.stdout or version.stderr).strip().splitlines()[0]
    print(
        f"uvicorn {uvicorn.__version__} (httptools, uvloop), {wrk_version}; "
        f"server on CPU {server_cpus or 'any (not pinned)'}, "
        f"wrk on CPU {os.environ.get('SERVINGLIB_BENCH_CLIENT_CPUS', 'any')}; "
        f"{args.seconds:g} s per cell after {args.warmup_seconds:g} s of warm-up; "
        "concurrency = wrk connections (one thread), one request outstanding on each"
    )
    with tempfile.TemporaryDirectory() as name:
        if args.request_logging:
            run_logging(args, Path(name), server_cpus)
            return
        cells = run_all(args, Path(name), server_cpus)
    report(cells, args)


def run_logging(args: argparse.Namespace, tmp: Path, server_cpus: str | None) -> None:
    """One server per logging rate (off, 0.01, 1.0), measured back to back, best of passes."""
    workload = trivial_workloads()[0]  # TFS :predict, thread
    with contextlib.ExitStack() as stack:
        ports: dict[float | None, int] = {}
        for rate in LOGGING_RATES:
            port = ports[rate] = free_port()
            config = write_trivial_models(tmp, rate)
            server = cli_command(port, f"--model_config_file={config}")
            probe = f"/v1/models/{TRIVIAL_MODELS['thread']}"
            log = tmp / f"server-{rate}.log"
            stack.enter_context(running_http(pinned(server, server_cpus), port, log, probe))
            workload.check(post(port, workload.path, workload.body))

        def measure_rps(port: int, concurrency: int) -> float:
            cell = measure(port, workload, concurrency, args=args, tmp=tmp)
            if cell.non2xx or cell.socket_errors:
                raise RuntimeError(f"errors under load: {cell}")
            return cell.rps

        rps = best_of_passes(LOGGING_PASSES, args.concurrency, ports, measure_rps)
        for rate, port in ports.items():
            print(f"sampling {rate}: request_log_count {request_log_counts(port)}")
    print_logging_ratios(rps, "REST TFS :predict, thread")


if __name__ == "__main__":
    main()
