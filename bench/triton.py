"""Benchmark: servinglib against Triton Inference Server on one Triton-format repository.

The repository holds four Python-backend models, written as Triton's documentation writes them:
``add_sub`` (two [4] FP32 inputs, their sum and difference; unbatched), ``batched`` (a [16]
FP32 row doubled, ``max_batch_size: 64`` with ``dynamic_batching``, and a fixed 1 ms of Python
per ``execute`` call, as a model whose cost is per call rather than per row), and ``gil1`` /
``gil2`` (1 ms of pure Python per request, holding the GIL; ``instance_group`` count 1 and 2).
The same directory is served by the ``tritonserver`` of the ``nvidia-pytriton`` wheel
(Triton 2.51, see tests/triton/oracle.py) and by ``python -m servinglib --model_repository``.

Cells, each run on both servers in turn (``--passes`` times; the best pass counts):

1. ``add_sub`` at concurrency 8 over HTTP (wrk, V2 JSON) and gRPC (h2load, V2 ``ModelInfer``),
   the server pinned to one CPU and the load generator to the other (target: servinglib
   >= 1.5x Triton on both).
2. ``batched`` at concurrency 64 over gRPC, pinned likewise: req/s and rows per ``execute``
   (the statistics' successes over executions; target: both >= Triton's).
3. ``gil2`` against ``gil1`` at concurrency 8 over HTTP and gRPC, the server on both CPUs (restarted
   unpinned; the load generator shares them): the ratio of req/s (target >= 1.8x, and Triton's
   own ratio beside it), and the memory of one instance: the mean RSS and PSS of the server's
   child processes (Triton runs every instance in a stub process; servinglib runs one instance
   in the server's process and two in model processes).

With ``--threads``, each cell also reports the servers' CPU per request by thread name, the
server's own process apart from its children (Triton's stubs, servinglib's model processes).

With ``--inline``, ``add_sub``'s config also sets servinglib's model parameter
``EXECUTION_MODE: inline`` (its ``execute`` runs on the event loop, no worker thread; Triton
passes the parameter to the model and does nothing with it), so both ways are measured on the
same repository.

Every answer is checked once per server with tritonclient before the load, and the load
generator's successes are compared with the server's own statistics after it (h2load counts a
gRPC error as a success). Run with ``./dev bench triton``; needs ``wrk``, ``h2load`` and the
Triton that ``./dev setup`` installs.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from _common import INDENT, print_environment, print_target
from _load import WRK_LUA, grpc_frame, h2load, wrk
from _servers import ROOT, free_port, pinned, running

from servinglib.protos import grpc_service_pb2

# bench/grpc.py, beside this file, would shadow grpcio (tritonclient imports it): drop this
# directory from sys.path now that the helpers beside it are imported.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))
from tests.triton.oracle import (  # noqa: E402
    ADD_SUB_MODEL_PY,
    TritonUnavailableError,
    find_triton,
    running_triton,
)

V2_INFER = "/inference.GRPCInferenceService/ModelInfer"
SERVINGLIB_FLAGS: list[str] = []  # --servinglib-flag: more flags for python -m servinglib
ADD_SUB_TARGET = 1.5
INSTANCES_TARGET = 1.8
BOUND = "bound"

ADD_SUB = (
    """
backend: "python"
max_batch_size: 0
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
instance_group [ { count: 1 kind: KIND_CPU } ]
""",
    ADD_SUB_MODEL_PY,  # Triton's add_sub model.py, as the oracle tests serve it
)

BATCHED = (
    """
backend: "python"
max_batch_size: 64
input [ { name: "X" data_type: TYPE_FP32 dims: [ 16 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 16 ] } ]
dynamic_batching { max_queue_delay_microseconds: 2000 }
instance_group [ { count: 1 kind: KIND_CPU } ]
""",
    """
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        end = time.perf_counter() + 0.001  # the model's cost per call, whatever its rows
        while time.perf_counter() < end:
            pass
        xs = [pb_utils.get_input_tensor_by_name(r, "X").as_numpy() for r in requests]
        ys = np.concatenate(xs) * 2
        responses, start = [], 0
        for x in xs:
            y = ys[start : start + len(x)]
            start += len(x)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", y)]))
        return responses
""",
)

GIL_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "X" data_type: TYPE_FP32 dims: [ 1 ] } ]
output [ { name: "Y" data_type: TYPE_FP32 dims: [ 1 ] } ]
instance_group [ { count: COUNT kind: KIND_CPU } ]
"""

GIL_MODEL = """
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "X").as_numpy()
            end = time.perf_counter() + 0.001  # 1 ms of Python, holding the GIL
            while time.perf_counter() < end:
                pass
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("Y", x + 1)]))
        return responses
"""


def write_repository(root: Path) -> Path:
    """The four models, in Triton's layout; returns the repository."""
    models = {
        "add_sub": ADD_SUB,
        "batched": BATCHED,
        "gil1": (GIL_CONFIG.replace("COUNT", "1"), GIL_MODEL),
        "gil2": (GIL_CONFIG.replace("COUNT", "2"), GIL_MODEL),
    }
    for name, (config, model_py) in models.items():
        (root / name / "1").mkdir(parents=True)
        (root / name / "config.pbtxt").write_text(config)
        (root / name / "1" / "model.py").write_text(model_py)
    return root


# --------------------------------------------------------------------------- requests


@dataclasses.dataclass(frozen=True)
class Workload:
    """One model's request, as V2 JSON and as a V2 ``ModelInfer`` message, and its answer."""

    model: str
    inputs: dict[str, np.ndarray]
    expected: dict[str, np.ndarray]

    def json_body(self) -> bytes:
        return json.dumps(
            {
                "inputs": [
                    {"name": n, "datatype": "FP32", "shape": list(x.shape), "data": x.tolist()}
                    for n, x in self.inputs.items()
                ]
            }
        ).encode()

    def grpc_body(self) -> bytes:
        request = grpc_service_pb2.ModelInferRequest(model_name=self.model)
        for name, x in self.inputs.items():
            request.inputs.add(name=name, datatype="FP32", shape=x.shape)
            request.raw_input_contents.append(x.tobytes())
        return grpc_frame(request.SerializeToString())


A = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
B = np.array([0.5, 0.5, 0.5, 0.5], np.float32)
ROW = np.arange(16, dtype=np.float32).reshape(1, 16)
ONE = np.array([1.0], np.float32)
WORKLOADS = {
    "add_sub": Workload(
        "add_sub", {"INPUT0": A, "INPUT1": B}, {"OUTPUT0": A + B, "OUTPUT1": A - B}
    ),
    "batched": Workload("batched", {"X": ROW}, {"Y": ROW * 2}),
    "gil1": Workload("gil1", {"X": ONE}, {"Y": ONE + 1}),
    "gil2": Workload("gil2", {"X": ONE}, {"Y": ONE + 1}),
}


# --------------------------------------------------------------------------- servers


@dataclasses.dataclass(frozen=True)
class Server:
    """A started server: its name, HTTP and gRPC ports, and process id."""

    name: str
    http_port: int
    grpc_port: int
    pid: int


@contextlib.contextmanager
def triton(repository: Path, tmp: Path, cpus: str | None) -> Iterator[Server]:
    workdir = Path(tempfile.mkdtemp(dir=tmp))
    prefix = ["taskset", "-c", cpus] if cpus else []
    with running_triton(repository, workdir, prefix=prefix) as started:
        http_port = int(started.http_url.rsplit(":", 1)[1])
        grpc_port = int(started.grpc_url.rsplit(":", 1)[1])
        yield Server("Triton", http_port, grpc_port, started.pid)


@contextlib.contextmanager
def servinglib(repository: Path, tmp: Path, cpus: str | None) -> Iterator[Server]:
    http_port, grpc_port = free_port(), free_port()
    command = [
        sys.executable,
        "-m",
        "servinglib",
        f"--model_repository={repository}",
        "--allow_python_code_execution",
        f"--port={grpc_port}",
        f"--rest_api_port={http_port}",
        "--rest_api_host=127.0.0.1",
        "--grpc_host=127.0.0.1",
        *SERVINGLIB_FLAGS,
    ]

    log = tmp / "servinglib.log"
    with running(pinned(command, cpus), log, ready_waiter(http_port, log)) as process:
        yield Server("servinglib", http_port, grpc_port, process.pid)


def ready_waiter(http_port: int, log: Path) -> Callable[[object], None]:
    """Waits (2 minutes at most) until the server on ``http_port`` answers V2 ready; raises
    with its ``log`` if it does not."""

    def wait_ready(process: object) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                url = f"http://127.0.0.1:{http_port}/v2/health/ready"
                with urllib.request.urlopen(url, timeout=1) as reply:
                    if reply.status == 200:
                        return
            time.sleep(0.1)  # a server starting: no event to wait on
        raise RuntimeError(f"{log.stem} was not ready:\n{log.read_text()}")

    return wait_ready


@contextlib.contextmanager
def bound(repository: Path, tmp: Path, cpus: str | None) -> Iterator[Server]:
    """bench/_triton_bound.py: the batched HTTP cell's own steps in one function, nothing else."""
    http_port = free_port()
    script = Path(__file__).resolve().parent / "_triton_bound.py"
    command = [sys.executable, str(script), f"--port={http_port}", f"--repository={repository}"]

    log = tmp / "bound.log"
    with running(pinned(command, cpus), log, ready_waiter(http_port, log)) as process:
        yield Server(BOUND, http_port, 0, process.pid)


def check_bound_answer(server: Server, workload: Workload) -> None:
    """One V2 JSON request to the bound; raises unless its answer is right."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{server.http_port}/v2/models/{workload.model}/infer",
        data=workload.json_body(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        (output,) = json.load(reply)["outputs"]
    expected = workload.expected[output["name"]]
    if output["data"] != expected.ravel().tolist():
        raise RuntimeError(f"the bound answered {workload.model} wrongly")


def statistics(server: Server, model: str) -> tuple[int, int]:
    """The model's successful requests and executions so far, from V2 statistics."""
    url = f"http://127.0.0.1:{server.http_port}/v2/models/{model}/stats"
    with urllib.request.urlopen(url, timeout=10) as reply:
        stats = json.load(reply)["model_stats"]
    successes = sum(int(s["inference_stats"]["success"]["count"]) for s in stats)
    executions = sum(int(s["execution_count"]) for s in stats)
    return successes, executions


def check_answers(server: Server, workload: Workload) -> None:
    """One request over each protocol with tritonclient; raises unless the answer is right."""
    import tritonclient.grpc as grpcclient
    import tritonclient.http as httpclient

    for module, url in (
        (httpclient, f"127.0.0.1:{server.http_port}"),
        (grpcclient, f"127.0.0.1:{server.grpc_port}"),
    ):
        client = module.InferenceServerClient(url)
        inputs = []
        for name, x in workload.inputs.items():
            tensor = module.InferInput(name, list(x.shape), "FP32")
            tensor.set_data_from_numpy(x)
            inputs.append(tensor)
        result = client.infer(workload.model, inputs)
        for name, expected in workload.expected.items():
            if not np.array_equal(result.as_numpy(name), expected):
                raise RuntimeError(f"{server.name} {workload.model} answered wrongly for {name}")
        client.close()


def process_tree(pid: int) -> list[int]:
    """``pid``'s descendants (children first), from /proc."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        children = parents.get(todo.pop(), [])
        found.extend(children)
        todo.extend(children)
    return found


def cpu_s(pid: int) -> float:
    """The CPU time (user + system) ``pid`` and its descendants have used so far."""
    total = 0
    for each in (pid, *process_tree(pid)):
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def thread_cpu_s(pid: int) -> dict[tuple[str, int, str], float]:
    """CPU seconds so far of each thread of ``pid`` and its descendants, by (the server's
    process or a child's, thread id, thread name)."""
    found = {}
    for each in (pid, *process_tree(pid)):
        role = "server" if each == pid else "child"
        with contextlib.suppress(OSError):
            for task in Path(f"/proc/{each}/task").iterdir():
                with contextlib.suppress(OSError):
                    stat = (task / "stat").read_text()
                    name = stat[stat.index("(") + 1 : stat.rindex(")")]
                    fields = stat.rsplit(")", 1)[1].split()
                    ticks = int(fields[11]) + int(fields[12])
                    found[role, int(task.name), name] = ticks / os.sysconf("SC_CLK_TCK")
    return found


def per_thread_us(
    before: dict[tuple[str, int, str], float],
    after: dict[tuple[str, int, str], float],
    requests: int,
) -> tuple[tuple[str, float], ...]:
    """µs of CPU per request by thread name and process kind (threads of one name summed,
    their number beside it), largest first, those under 5 µs left out."""
    groups: dict[str, list[float]] = {}
    for key, seconds in after.items():
        role, _, name = key
        groups.setdefault(f"{role} {name}", []).append(seconds - before.get(key, 0.0))
    rows = [
        (f"{label} x{len(spent)}" if len(spent) > 1 else label, 1e6 * sum(spent) / requests)
        for label, spent in groups.items()
    ]
    return tuple(sorted((row for row in rows if row[1] >= 5), key=lambda row: -row[1]))


def memory_kib(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of ``pid`` in KiB, from smaps_rollup."""
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        key, value = line.split(":", 1)
        fields[key] = int(value.split()[0])
    return fields["Rss"], fields["Pss"]


# --------------------------------------------------------------------------- cells


@dataclasses.dataclass(frozen=True)
class Cell:
    """One measured cell: requests per second, p50/p99 (ms) and the server's counts."""

    server: str
    label: str
    rps: float
    p50_ms: float
    p99_ms: float
    errors: int
    rows_per_execute: float
    cpu_us: float  # the server's CPU time (its processes together) per request
    threads: tuple[tuple[str, float], ...] = ()  # --threads: µs per request by thread name


def run_cell(
    server: Server,
    workload: Workload,
    protocol: str,
    concurrency: int,
    *,
    args: argparse.Namespace,
    tmp: Path,
) -> Cell:
    """A warm-up, then the measured run; errors: the load generator's failures, and any
    difference between its successes and the server's beyond the requests still in flight
    when either count was read."""
    if protocol == "http":
        body, script = tmp / "body.json", tmp / "post.lua"
        body.write_bytes(workload.json_body())
        script.write_text(WRK_LUA)
        path = f"/v2/models/{workload.model}/infer"

        def measure(seconds: float) -> tuple[int, int, float, float, float]:
            f = wrk(server.http_port, path, body, script, concurrency=concurrency, seconds=seconds)
            failed = int(f["non2xx"] + f["connect"] + f["read"] + f["write"] + f["timeout"])
            ok = int(f["requests"]) - int(f["non2xx"])
            return ok, failed, f["duration_us"] / 1e6, f["p50"] / 1e3, f["p99"] / 1e3

    else:
        body, log = tmp / "body.bin", tmp / "h2load.log"
        body.write_bytes(workload.grpc_body())

        def measure(seconds: float) -> tuple[int, int, float, float, float]:
            ok, failed, elapsed = h2load(
                server.grpc_port, V2_INFER, body, concurrency=concurrency, seconds=seconds, log=log
            )
            latencies = sorted(
                int(fields[2]) / 1000
                for fields in (line.split("\t") for line in log.read_text().splitlines())
                if len(fields) >= 3 and fields[1] == "200"
            )
            p50 = latencies[len(latencies) // 2] if latencies else float("nan")
            p99 = latencies[int(len(latencies) * 0.99)] if latencies else float("nan")
            return ok, failed, elapsed, p50, p99

    measure(args.warmup_seconds)
    threads_started = thread_cpu_s(server.pid) if args.threads else {}
    started, cpu_started = statistics(server, workload.model), cpu_s(server.pid)
    ok, failed, elapsed, p50, p99 = measure(args.seconds)
    ended, cpu_ended = statistics(server, workload.model), cpu_s(server.pid)
    threads_ended = thread_cpu_s(server.pid) if args.threads else {}
    served, executions = ended[0] - started[0], ended[1] - started[1]
    return Cell(
        server.name,
        f"{workload.model} {protocol} c{concurrency}",
        ok / elapsed,
        p50,
        p99,
        failed + max(0, abs(ok - served) - 2 * concurrency),
        served / max(executions, 1),
        1e6 * (cpu_ended - cpu_started) / max(served, 1),
        per_thread_us(threads_started, threads_ended, max(served, 1)),
    )


def best(cells: list[Cell]) -> Cell:
    return max(cells, key=lambda cell: cell.rps)


def measure_pinned(args: argparse.Namespace, repository: Path, tmp: Path) -> list[Cell]:
    """Cells 1 and 2: the server on the server CPU, alternating servers pass by pass."""
    cpus = os.environ.get("SERVINGLIB_BENCH_SERVER_CPUS")
    plan = [
        ("add_sub", "http", 8),
        ("add_sub", "grpc", 8),
        ("batched", "http", 64),
        ("batched", "grpc", 64),
    ]
    runs: dict[tuple[str, str], list[Cell]] = {}
    for _ in range(args.passes):
        for start in (triton, servinglib):
            with start(repository, tmp, cpus) as server:
                for model, protocol, concurrency in plan:
                    check_answers(server, WORKLOADS[model])
                    cell = run_cell(
                        server, WORKLOADS[model], protocol, concurrency, args=args, tmp=tmp
                    )
                    runs.setdefault((server.name, cell.label), []).append(cell)
        if not args.skip_bound:
            with bound(repository, tmp, cpus) as server:
                check_bound_answer(server, WORKLOADS["batched"])
                cell = run_cell(server, WORKLOADS["batched"], "http", 64, args=args, tmp=tmp)
                runs.setdefault((server.name, cell.label), []).append(cell)
    return [best(cells) for cells in runs.values()]


def measure_instances(
    args: argparse.Namespace, repository: Path, tmp: Path
) -> tuple[list[Cell], dict[str, tuple[float, float]]]:
    """Cell 3 on both CPUs; and each server's mean (RSS, PSS) per child process, in MiB."""
    runs: dict[tuple[str, str], list[Cell]] = {}
    memory: dict[str, tuple[float, float]] = {}
    every_cpu = ",".join(str(cpu) for cpu in range(os.cpu_count() or 1))
    for _ in range(args.passes):
        for start in (triton, servinglib):
            # Every CPU, named: a server started unpinned would inherit this script's one.
            with start(repository, tmp, every_cpu) as server:
                for protocol in ("http", "grpc"):
                    for model in ("gil1", "gil2"):
                        check_answers(server, WORKLOADS[model])
                        cell = run_cell(server, WORKLOADS[model], protocol, 8, args=args, tmp=tmp)
                        runs.setdefault((server.name, cell.label), []).append(cell)
                children = [memory_kib(pid) for pid in process_tree(server.pid)]
                if children:
                    memory[server.name] = (
                        sum(rss for rss, _ in children) / len(children) / 1024,
                        sum(pss for _, pss in children) / len(children) / 1024,
                    )
                rss, pss = memory_kib(server.pid)
                memory[server.name + " server"] = (rss / 1024, pss / 1024)
    return [best(cells) for cells in runs.values()], memory


# --------------------------------------------------------------------------- report


def report(cells: list[Cell], memory: dict[str, tuple[float, float]]) -> None:
    by = {(cell.server, cell.label): cell for cell in cells}
    print("\nCells (best of the passes):")
    print(
        f"{INDENT}{'server':<11} {'cell':<20} {'req/s':>8} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'rows/exec':>9} {'CPU µs':>7} {'errors':>6}"
    )
    for cell in cells:
        print(
            f"{INDENT}{cell.server:<11} {cell.label:<20} {cell.rps:>8.0f} {cell.p50_ms:>7.2f} "
            f"{cell.p99_ms:>7.2f} {cell.rows_per_execute:>9.1f} {cell.cpu_us:>7.0f} "
            f"{cell.errors:>6}"
        )
        print_threads(cell)
    if ("Triton", "add_sub grpc c8") in by:
        report_pinned(by)
    if ("Triton", "gil1 grpc c8") in by:
        report_instances(by, memory)
    errors = sum(cell.errors for cell in cells)
    print_target(errors == 0, f"errors: {errors} (0)")


def print_threads(cell: Cell) -> None:
    """``cell``'s CPU per request by thread (``--threads``), one line each."""
    for label, us in cell.threads:
        print(f"{INDENT}{INDENT}{us:>7.0f} µs per request: {label}")


def report_pinned(by: dict[tuple[str, str], Cell]) -> None:
    ratio: Callable[[str], float] = lambda label: (  # noqa: E731 - one line of arithmetic
        by["servinglib", label].rps / by["Triton", label].rps
    )
    print("\nRatios, servinglib / Triton:")
    for label in ("add_sub http c8", "add_sub grpc c8"):
        print_target(ratio(label) >= ADD_SUB_TARGET, f"{label}: {ratio(label):.2f}x (>= 1.5x)")
    for batched in ("batched http c64", "batched grpc c64"):
        rows = by["servinglib", batched].rows_per_execute / by["Triton", batched].rows_per_execute
        print_target(ratio(batched) >= 1.0, f"{batched} req/s: {ratio(batched):.2f}x (>= 1x)")
        print_target(rows >= 1.0, f"{batched} rows per execute: {rows:.2f}x (>= 1x)")
    if (BOUND, "batched http c64") in by:
        label = "batched http c64"
        ceiling = by[BOUND, label].rps / by["Triton", label].rps
        print(
            f"{INDENT}{BOUND} (the cell's own steps in one function, bench/_triton_bound.py): "
            f"{ceiling:.2f}x Triton; servinglib reaches "
            f"{by['servinglib', label].rps / by[BOUND, label].rps:.2f}x the bound"
        )


def report_instances(
    by: dict[tuple[str, str], Cell], memory: dict[str, tuple[float, float]]
) -> None:
    print("\nInstances, gil2 / gil1 req/s (server on both CPUs):")
    for protocol in ("http", "grpc"):
        for server in ("servinglib", "Triton"):
            scale = by[server, f"gil2 {protocol} c8"].rps / by[server, f"gil1 {protocol} c8"].rps
            if server == "servinglib":
                print_target(
                    scale >= INSTANCES_TARGET, f"servinglib, {protocol}: {scale:.2f}x (>= 1.8x)"
                )
            else:
                print(f"{INDENT}Triton, {protocol}: {scale:.2f}x")
    print("\nMemory (MiB, RSS / PSS): a model process or stub (mean), and the server's own:")
    for name, (rss, pss) in sorted(memory.items()):
        print(f"{INDENT}{name:<18} {rss:7.1f} / {pss:7.1f}")


INLINE_PARAMETER = 'parameters { key: "EXECUTION_MODE" value: { string_value: "inline" } }'
"""servinglib's model parameter that runs a Python model's execute inline (Triton ignores it)."""


def add_inline_flag(parser: argparse.ArgumentParser) -> None:
    """``--inline``: the trivial Python models' configs say EXECUTION_MODE inline."""
    parser.add_argument(
        "--inline",
        action="store_true",
        help="give the trivial Python models EXECUTION_MODE inline (servinglib runs execute on "
        "the event loop; Triton ignores the parameter)",
    )


def run_inline(config: Path) -> None:
    """Appends :data:`INLINE_PARAMETER` to the ``config.pbtxt`` at ``config``."""
    config.write_text(config.read_text() + "\n" + INLINE_PARAMETER + "\n")


def add_threads_flag(parser: argparse.ArgumentParser) -> None:
    """``--threads``: :func:`run_cell` reports the servers' CPU per request by thread."""
    parser.add_argument(
        "--threads",
        action="store_true",
        help="under each cell, the servers' CPU per request by thread (and model process)",
    )


def add_servinglib_flag(parser: argparse.ArgumentParser) -> None:
    """``--servinglib-flag``: more flags for ``python -m servinglib`` (:data:`SERVINGLIB_FLAGS`)."""
    parser.add_argument(
        "--servinglib-flag",
        action="append",
        default=[],
        help="one more flag for python -m servinglib (repeatable), e.g. --grpc_server=aio",
    )


def require_triton_and_load_generators(script: str) -> None:
    """Exits, naming what is missing, unless wrk, h2load and a Triton that runs are here."""
    for tool in ("wrk", "h2load"):
        if shutil.which(tool) is None:
            sys.exit(f"{script} needs {tool}: apt-get install wrk nghttp2-client")
    try:
        find_triton()
    except TritonUnavailableError as reason:
        sys.exit(f"{script} needs Triton: {reason}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--warmup-seconds", type=float, default=2.0)
    parser.add_argument("--passes", type=int, default=2)
    add_servinglib_flag(parser)
    add_inline_flag(parser)
    parser.add_argument("--only", choices=("pinned", "instances"), help="one group of cells")
    parser.add_argument(
        "--skip-bound", action="store_true", help="leave out the batched HTTP cell's bound"
    )
    add_threads_flag(parser)
    args = parser.parse_args()
    SERVINGLIB_FLAGS.extend(args.servinglib_flag)
    require_triton_and_load_generators("bench/triton.py")
    print_environment("bench/triton.py: servinglib against Triton 2.51 on one repository")
    server_cpus = os.environ.get("SERVINGLIB_BENCH_SERVER_CPUS", "any")
    client_cpus = os.environ.get("SERVINGLIB_BENCH_CLIENT_CPUS", "any")
    print(f"{INDENT}cells 1-2: servers on CPU {server_cpus}, load on CPU {client_cpus}")
    print(f"{INDENT}cell 3: servers on every CPU, load on CPU {client_cpus}")
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        repository = write_repository(tmp / "models")
        if args.inline:
            run_inline(repository / "add_sub" / "config.pbtxt")
            print(f"{INDENT}add_sub: EXECUTION_MODE inline")
        cells, memory = [], {}
        if args.only != "instances":
            cells += measure_pinned(args, repository, tmp)
        if args.only != "pinned":
            instance_cells, memory = measure_instances(args, repository, tmp)
            cells += instance_cells
    report(cells, memory)


if __name__ == "__main__":
    main()
