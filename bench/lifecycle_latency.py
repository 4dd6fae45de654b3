"""Benchmark: one model's latency while other models load, unload, swap and get reloaded.

The server under test is the CLI (``python -m servinglib``, REST and gRPC on one event loop,
defaults otherwise: ``--freeze_heap`` on) pinned with ``taskset`` to one CPU, serving
``plus_one`` (a numpy Python servable, float32 [1,16] -> x + 1, ``thread`` mode). wrk (REST,
TF Serving ``:predict``) and h2load (gRPC, V2 ``ModelInfer`` with raw contents), on the other
CPU, each drive it in turn at ``--concurrency`` (8) connections with one request outstanding
each, for ``--seconds`` per protocol and phase. The phases, in turn:

1. ``steady``: nothing else happens;
2. ``savedmodel load/unload``: a SavedModel of ``--savedmodel-mb`` (300) MB in 200 variables,
   written by this script with TensorFlow, is added to the config (SIGHUP), served once
   available for ``--hold-s`` (1 s), removed (SIGHUP), and after ``--hold-s`` added again;
   with ``--model-process``, the "tensorflow" platform loads each version in a model process
   of its own (``TensorFlowPlatformOptions.model_process``), and the phase is called
   ``savedmodel (own process)``;
3. ``python version swaps``: a new version of the Python model ``swapper`` is published every
   second (written beside its base path, renamed in), the previous one unloads;
4. ``config reload +-100``: the config gains 100 Python models (SIGHUP, waits for them all to
   be available), holds ``--hold-s``, loses them again, holds, and so on.

Each phase prints p50/p99/max (ms) per protocol beside the steady state of the same run, the
ratio of p99s, and PASS/MISS per phase and protocol against the target (issue 19): p99 <= 1.5 x
steady and no request over 50 ms. The server's log says when each load finished; the script
follows it, so waiting adds no requests. A ``retrans`` column counts the TCP segments the
machine retransmitted during each cell (each waits >= 200 ms: such tails are the kernel's).
``--trace-pauses`` runs the server under ``_pause_trace.py`` and sums its GC pauses and stalls
per phase, naming the threads that ran during them. ``--gil`` adds a measured bound: in a
process pinned to the server CPU, a thread that asks to wake every millisecond, while the main
thread loads and unloads the SavedModel (heap not frozen; frozen first; and with the 1 ms GIL
switch interval the server uses while versions load): its delays are how long the load and
unload keep every other Python thread (the event loop included) from running.
Run with ``./dev bench lifecycle_latency`` (see bench/README.md); needs wrk and h2load.
"""

from __future__ import annotations

import argparse
import collections
import gc
import math
import os
import re
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from _common import INDENT, percentile, print_environment, print_target
from _servers import TRIVIAL_MODEL_PY, free_port, pinned, running

P99_FACTOR_TARGET = 1.5
MAX_MS_TARGET = 50.0
EXTRA_MODELS = 100
SAVEDMODEL_VARIABLES = 200
START_TIMEOUT_S = 120.0
WAIT_TIMEOUT_S = 120.0
HERE = Path(__file__).resolve().parent
_PAUSE = re.compile(r"^PAUSE (gc gen=(\d)|stall) ms=([\d.]+).* t=([\d.]+)$", re.MULTILINE)
_NUMBERED = re.compile(r"[_-]?\d+$")  # a pool thread's number
_BUSY = re.compile(r"^BUSY t=([\d.]+) ms=(\d+) (\S+) (.*)$", re.MULTILINE)
_APPLIED = r"applied model config file"
X = np.arange(16, dtype=np.float32).reshape(1, 16)

MODEL_PROCESS_PLATFORM_CONFIG = """platform_configs {
  key: "tensorflow"
  value {
    source_adapter_config {
      [type.googleapis.com/servinglib.tfs.TensorFlowPlatformOptions] { model_process: true }
    }
  }
}
"""

WRK_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = os.getenv("SERVINGLIB_BENCH_BODY")

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "SERVINGLIB requests=%d non2xx=%d errors=%d p50=%d p99=%d max=%d\\n",
    summary.requests, e.status, e.connect + e.read + e.write + e.timeout,
    latency:percentile(50), latency:percentile(99), latency.max))
end
"""


def write_savedmodel(path: Path, total_mb: int) -> None:
    """A SavedModel of ``total_mb`` MB in SAVEDMODEL_VARIABLES variables: y = x + sum(w0)."""
    import tensorflow as tf

    size = max(1, (total_mb << 20) // 4 // SAVEDMODEL_VARIABLES)

    class Big(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.weights = [
                tf.Variable(tf.fill([size], float(i)), name=f"w{i}")
                for i in range(SAVEDMODEL_VARIABLES)
            ]

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")], autograph=False)
        def predict(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"y": x + self.weights[1][0]}

    module = Big()
    tf.saved_model.save(module, str(path / "1"), signatures={"serving_default": module.predict})


def write_python_version(base: Path, version: int) -> None:
    """Publishes ``base/version`` of the trivial Python model: written aside, renamed in."""
    staging = base.parent / f".{base.name}-{version}.staging"
    staging.mkdir(parents=True)
    (staging / "model.py").write_text(TRIVIAL_MODEL_PY.format(mode="THREAD"))
    staging.rename(base / str(version))


def config_text(models: Sequence[tuple[str, Path, str]]) -> str:
    """A models.config serving ``models`` (name, base path, platform)."""
    entries = "".join(
        f'  config {{ name: "{n}" base_path: "{p}" model_platform: "{f}" }}\n' for n, p, f in models
    )
    return f"model_config_list {{\n{entries}}}\n"


class Server:
    """The CLI serving the models of ``config`` (rewritten and re-read by SIGHUP)."""

    def __init__(self, process: subprocess.Popen[bytes], config: Path, log: Path) -> None:
        self.process, self.config, self.log = process, config, log

    def count(self, pattern: str) -> int:
        return len(re.findall(pattern, self.log.read_text(errors="replace"), re.MULTILINE))

    def reload(self, models: Sequence[tuple[str, Path, str]], *, wait_for: str, times: int) -> None:
        """Serves ``models`` (SIGHUP); returns once applied and ``wait_for`` logged ``times`` more.

        The reload itself waits for the models it adds, not for those it removes to unload.
        """
        before, applied = self.count(wait_for), self.count(_APPLIED)
        self.config.write_text(config_text(models))
        self.process.send_signal(signal.SIGHUP)
        self.wait(_APPLIED, applied + 1)
        self.wait(wait_for, before + times)

    def wait(self, pattern: str, count: int) -> None:
        deadline = time.monotonic() + WAIT_TIMEOUT_S
        while self.count(pattern) < count:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"waited for {pattern!r}: {self.log.read_text()[-3000:]}")
            time.sleep(0.01)  # following another process's log


class Activity:
    """Runs ``cycle(stop)`` over and over on a thread until :meth:`stop`; counts the cycles."""

    def __init__(self, cycle: Callable[[threading.Event], None]) -> None:
        self._stop = threading.Event()
        self.cycles = 0
        self.error: BaseException | None = None

        def run() -> None:
            try:
                while not self._stop.is_set():
                    cycle(self._stop)
                    self.cycles += 1
            except BaseException as error:  # noqa: BLE001 - reported by stop()
                self.error = error

        self._thread = threading.Thread(target=run, name="lifecycle-activity")
        self._thread.start()

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        if self.error is not None:
            raise RuntimeError("the lifecycle activity failed") from self.error
        return self.cycles


def wrk(port: int, tmp: Path, concurrency: int, seconds: int) -> dict[str, float]:
    """wrk posting ``:predict`` to plus_one; its figures (latencies in ms)."""
    script = tmp / "post.lua"
    script.write_text(WRK_LUA)
    body = '{"instances": ' + str(X.tolist()) + "}"
    command = [
        "wrk",
        "--threads=1",
        f"--connections={concurrency}",
        f"--duration={seconds}s",
        "--timeout=10s",
        f"--script={script}",
        f"http://127.0.0.1:{port}/v1/models/plus_one:predict",
    ]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "SERVINGLIB_BENCH_BODY": body},
    )
    line = re.search(r"^SERVINGLIB (.*)$", done.stdout, re.MULTILINE)
    if done.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed: {done.stdout}\n{done.stderr}")
    figures = {k: float(v) for k, v in re.findall(r"(\S+)=(\S+)", line.group(1))}
    for key in ("p50", "p99", "max"):
        figures[key] /= 1e3
    return figures


def h2load(
    port: int, tmp: Path, concurrency: int, seconds: int, *, multiplexed: bool = False
) -> dict[str, float]:
    """h2load posting V2 ModelInfer (raw contents) to plus_one; figures from its request log.

    ``multiplexed``: the ``concurrency`` requests as streams of one connection.
    """
    from servinglib.protos import grpc_service_pb2

    request = grpc_service_pb2.ModelInferRequest(model_name="plus_one")
    request.inputs.add(name="x", datatype="FP32", shape=X.shape)
    request.raw_input_contents.append(X.tobytes())
    message = request.SerializeToString()
    body, log = tmp / "infer.bin", tmp / "h2load.log"
    body.write_bytes(struct.pack(">?I", False, len(message)) + message)
    log.unlink(missing_ok=True)
    command = [
        "h2load",
        f"--clients={1 if multiplexed else concurrency}",
        f"--max-concurrent-streams={concurrency if multiplexed else 1}",
        "--threads=1",
        f"--duration={seconds}",
        f"--data={body}",
        "--header=content-type: application/grpc",
        "--header=te: trailers",
        f"--log-file={log}",
        f"http://127.0.0.1:{port}/inference.GRPCInferenceService/ModelInfer",
    ]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    counts = re.search(r"(\d+) succeeded, (\d+) failed", done.stdout)
    if done.returncode != 0 or counts is None:
        raise RuntimeError(f"h2load failed: {done.stdout}\n{done.stderr}")
    latencies = sorted(
        int(fields[2]) / 1e3
        for fields in (line.split("\t") for line in log.read_text().splitlines())
        if len(fields) >= 3 and fields[1] == "200"
    )
    if not latencies:  # nothing answered in time: the figures say so rather than a traceback
        latencies = [math.inf]
    return {
        "requests": float(len(latencies)),
        "errors": float(counts.group(2)),
        "p50": percentile(latencies, 0.50),
        "p99": percentile(latencies, 0.99),
        "max": latencies[-1],
    }


class Rig:
    """The models on disk, the server, and one cycle function per lifecycle phase."""

    def __init__(self, tmp: Path, args: argparse.Namespace) -> None:
        self.tmp, self.args = tmp, args
        models = tmp / "models"
        self.plus_one = models / "plus_one"
        self.swapper = models / "swapper"
        self.big = models / "big"
        for base in (self.plus_one, self.swapper):
            base.mkdir(parents=True)
            write_python_version(base, 1)
        self.swapped = 1
        self.extras = [(f"extra-{i:03}", models / f"extra-{i:03}", "python") for i in range(100)]
        for _, base, _ in self.extras:
            base.mkdir()
            write_python_version(base, 1)
        self.base_models = [
            ("plus_one", self.plus_one, "python"),
            ("swapper", self.swapper, "python"),
        ]
        self.big_model = ("big", self.big, "tensorflow")
        self.windows: list[tuple[float, float]] = []  # each measure()'s monotonic start and end

    def start(self, server_cpus: str | None) -> tuple[Server, object]:
        config = self.tmp / "models.config"
        # The SavedModel is served from the start, so TensorFlow is imported before any phase.
        config.write_text(config_text([*self.base_models, self.big_model]))
        self.port, self.rest_port = free_port(), free_port()
        traced = self.args.trace_pauses or "SERVINGLIB_BENCH_SWITCH_INTERVAL_MS" in os.environ
        launcher = [str(HERE / "_pause_trace.py")] if traced else ["-m", "servinglib"]
        command = [
            sys.executable,
            *launcher,
            f"--model_config_file={config}",
            "--allow_python_code_execution",
            f"--port={self.port}",
            f"--rest_api_port={self.rest_port}",
            "--rest_api_host=127.0.0.1",
            "--grpc_host=127.0.0.1",
            "--file_system_poll_wait_seconds=1",
            *self.args.server_flag,
        ]
        if self.args.model_process:
            platforms = self.tmp / "platforms.config"
            platforms.write_text(MODEL_PROCESS_PLATFORM_CONFIG)
            command.append(f"--platform_config_file={platforms}")
        log = self.tmp / "server.log"
        holder: list[Server] = []

        def wait_ready(process: subprocess.Popen[bytes]) -> None:
            server = Server(process, config, log)
            server.wait(r"Serving models: ", 1)
            holder.append(server)

        context = running(pinned(command, server_cpus), log, wait_ready)
        context.__enter__()
        server = holder[0]
        server.reload(self.base_models, wait_for=r"big v1 unloaded", times=1)
        return server, context

    def savedmodel_cycle(self, server: Server, stop: threading.Event) -> None:
        server.reload([*self.base_models, self.big_model], wait_for=r"big v1 available", times=1)
        stop.wait(self.args.hold_s)
        server.reload(self.base_models, wait_for=r"big v1 unloaded", times=1)
        stop.wait(self.args.hold_s)

    def swap_cycle(self, server: Server, stop: threading.Event) -> None:
        started = time.monotonic()
        self.swapped += 1
        write_python_version(self.swapper, self.swapped)
        server.wait(rf"swapper v{self.swapped} available", 1)
        server.wait(rf"swapper v{self.swapped - 1} unloaded", 1)
        shutil.rmtree(self.swapper / str(self.swapped - 1))
        stop.wait(max(0.0, 1.0 - (time.monotonic() - started)))

    def reload_cycle(self, server: Server, stop: threading.Event) -> None:
        last = self.extras[-1][0]
        server.reload([*self.base_models, *self.extras], wait_for=rf"{last} v1 available", times=1)
        stop.wait(self.args.hold_s)
        server.reload(self.base_models, wait_for=rf"{last} v1 unloaded", times=1)
        stop.wait(self.args.hold_s)


Figures = dict[str, float]


def measure(rig: Rig, args: argparse.Namespace) -> tuple[Figures, Figures]:
    """REST, then gRPC, each for ``args.seconds``: (wrk's figures, h2load's figures)."""
    started = time.monotonic()
    before = tcp_retransmits()
    rest = wrk(rig.rest_port, rig.tmp, args.concurrency, args.seconds)
    between = tcp_retransmits()
    grpc = h2load(rig.port, rig.tmp, args.concurrency, args.seconds, multiplexed=args.multiplexed)
    rest["retrans"], grpc["retrans"] = between - before, tcp_retransmits() - between
    rig.windows.append((started, time.monotonic()))
    return rest, grpc


def tcp_retransmits() -> float:
    """TCP segments the machine retransmitted so far (all processes: the machine is shared).

    A retransmitted segment waits at least Linux's minimum RTO, 200 ms: on loopback it is the
    kernel dropping a segment (a full queue, memory pressure), not the server pausing.
    """
    with open("/proc/net/snmp") as snmp:
        rows = [line.split() for line in snmp if line.startswith("Tcp:")]
    return float(rows[1][rows[0].index("RetransSegs")])


def report_pauses(
    log: Path, phases: Sequence[str], windows: Sequence[tuple[float, float]], top: int = 5
) -> None:
    """Section 4 (``--trace-pauses``): the server's pauses per phase, from its log.

    Under each phase, the threads that ran during stalls of 20 ms or more: CPU ms summed over
    the stalls, by thread (numbers dropped) and innermost frames.
    """
    text = log.read_text(errors="replace")
    pauses = _PAUSE.findall(text)
    busy = _BUSY.findall(text)
    print(
        "\n4. Where the time went (--trace-pauses): the server's garbage collections of >= 2 ms "
        "(count, total ms, max ms) by generation, and stalls of >= 5 ms of a thread waking "
        "every 1 ms (count, max ms; > 50 ms: count); under each phase, the threads that used "
        "the CPU during stalls of >= 20 ms (ms, by thread and innermost frames)"
    )
    print(f"{INDENT}{'phase':<26}{'gc gen0/1':>20}{'gc gen2':>22}{'stalls':>14}{'> 50 ms':>9}")
    for phase, (start, end) in zip(phases, windows, strict=True):
        young: list[float] = []
        full: list[float] = []
        stalls: list[float] = []
        for kind, generation, ms, stamp in pauses:
            if not start <= float(stamp) <= end:
                continue
            if kind == "stall":
                stalls.append(float(ms))
            else:
                (full if generation == "2" else young).append(float(ms))

        def cell(values: list[float]) -> str:
            return f"{len(values)}, {sum(values):.0f}, {max(values, default=0):.0f}"

        long_stalls = sum(1 for v in stalls if v > MAX_MS_TARGET)
        stall_cell = f"{len(stalls)}, {max(stalls, default=0):.0f}"
        print(
            f"{INDENT}{phase:<26}{cell(young):>20}{cell(full):>22}{stall_cell:>14}{long_stalls:>9}"
        )
        ran: collections.Counter[str] = collections.Counter()
        for stamp, ms, thread, where in busy:
            if start <= float(stamp) <= end:
                ran[f"{_NUMBERED.sub('', thread)} {where}"] += int(ms)
        for what, ms in ran.most_common(top):
            print(f"{INDENT}{INDENT}{ms:>6} ms  {what[:140]}")


def report(phases: dict[str, tuple[Figures, Figures]], cycles: dict[str, int]) -> None:
    """Section 2: the table, then the PASS/MISS lines.

    ``retrans``: TCP segments the whole machine retransmitted during the cell; each waits
    200 ms or more, so a cell with some can show tails that are not the server's.
    """
    print("\n2. Latency of plus_one (ms), each phase beside the steady state of this run:")
    header = f"{'phase':<26}{'protocol':>9}{'p50':>8}{'p99':>8}{'max':>8}{'p99/steady':>12}"
    print(f"{INDENT}{header}{'requests':>10}{'errors':>8}{'cycles':>8}{'retrans':>9}")
    steady = phases["steady"]
    verdicts = []
    for phase, figures in phases.items():
        for index, protocol in enumerate(("REST", "gRPC")):
            f, base = figures[index], steady[index]
            ratio = f["p99"] / base["p99"]
            errors = int(f.get("errors", 0) + f.get("non2xx", 0))
            print(
                f"{INDENT}{phase:<26}{protocol:>9}{f['p50']:>8.2f}{f['p99']:>8.2f}"
                f"{f['max']:>8.1f}{ratio:>12.2f}{int(f['requests']):>10}{errors:>8}"
                f"{cycles.get(phase, 0):>8}{int(f['retrans']):>9}"
            )
            if phase != "steady":
                met = ratio <= P99_FACTOR_TARGET and f["max"] <= MAX_MS_TARGET and errors == 0
                verdicts.append(
                    (
                        met,
                        f"{phase}, {protocol}: p99 {ratio:.2f} x steady (target <= "
                        f"{P99_FACTOR_TARGET}), max {f['max']:.1f} ms (target <= "
                        f"{MAX_MS_TARGET:g}), {errors} errors",
                    )
                )
    print()
    for met, text in verdicts:
        print_target(met, text)


def report_transitions(log: Path) -> None:
    """After section 2: how long the SavedModel's loads and unloads took, from the server's log.

    A load that runs at idle priority (``--model-process``) takes only CPU time the served
    model leaves; these figures show what that costs the load.
    """
    text = log.read_text(errors="replace")
    for what in ("available", "unloaded"):
        times = [float(t) for t in re.findall(rf"big v1 {what} in ([\d.]+) s", text)]
        if times:
            print(
                f"{INDENT}big v1 {what} in: median {statistics.median(times):.2f} s, max "
                f"{max(times):.2f} s ({len(times)} times; the first at start-up, on an idle core)"
            )


def gil_bound(args: argparse.Namespace, savedmodel: Path, server_cpus: str | None) -> None:
    """Section 3: the longest GIL holds of a SavedModel load and unload, in a pinned process."""
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--gil-probe",
        str(savedmodel),
        f"--loads={args.loads}",
    ]
    done = subprocess.run(pinned(command, server_cpus), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the GIL probe failed: {done.stdout}\n{done.stderr}")
    print(
        f"\n3. Measured bound: a thread asking to wake every 1 ms beside SavedModelLoader "
        f"load() / unload() of the {args.savedmodel_mb} MB SavedModel (same CPU, {args.loads} "
        "times: heap not frozen; frozen first; and with a 1 ms switch interval): its delays "
        "(ms) are how long each call kept other Python threads, an event loop included, waiting"
    )
    print(done.stdout.rstrip())


def gil_probe(path: Path, loads: int) -> None:
    """``--gil-probe``: loads and unloads ``path`` with a 1 ms ticker beside; prints delays."""
    from servinglib.loaders.tensorflow import SavedModelLoader

    delays: list[float] = []
    stop = threading.Event()

    def tick() -> None:
        while not stop.is_set():
            asked = time.perf_counter()
            time.sleep(0.001)
            delays.append((time.perf_counter() - asked) * 1e3 - 1.0)

    def timed(name: str, work: Callable[[], object]) -> None:
        delays.clear()
        started = time.perf_counter()
        work()
        took = (time.perf_counter() - started) * 1e3
        ordered = sorted(delays)
        late = sum(1 for d in ordered if d > MAX_MS_TARGET)
        print(
            f"{INDENT}{INDENT}{name:<8} took {took:7.1f} ms; ticker delay p50 "
            f"{percentile(ordered, 0.5):6.2f}, p99 {percentile(ordered, 0.99):6.2f}, "
            f"max {ordered[-1]:6.1f}; delays over {MAX_MS_TARGET:g} ms: {late}"
        )

    loader = SavedModelLoader(str(path / "1"))
    loader.load()  # TensorFlow imported, its first-load caches warm
    loader.unload()
    ticker = threading.Thread(target=tick)
    ticker.start()
    try:
        for frozen, switch_ms in ((False, 5.0), (True, 5.0), (True, 1.0)):
            if frozen:  # as servinglib-server does: the imports frozen before models load
                gc.collect()
                gc.freeze()
            sys.setswitchinterval(switch_ms / 1e3)  # 1 ms: the server's while versions load
            state = "frozen before the loads" if frozen else "not frozen"
            print(f"{INDENT}heap {state}, GIL switch interval {switch_ms:g} ms:")
            for _ in range(loads):
                timed("load", loader.load)
                timed("unload", loader.unload)
    finally:
        stop.set()
        ticker.join()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=int, default=10, help="seconds per protocol and phase")
    parser.add_argument("--concurrency", type=int, default=8, help="connections (8)")
    parser.add_argument(
        "--multiplexed",
        action="store_true",
        help="gRPC: every request a stream of one connection (h2load -c1 -mN)",
    )
    parser.add_argument("--savedmodel-mb", type=int, default=300, help="SavedModel size (300)")
    parser.add_argument("--hold-s", type=float, default=1.0, help="pause between changes (1)")
    parser.add_argument("--loads", type=int, default=3, help="--gil loads and unloads (3)")
    parser.add_argument("--gil", action="store_true", help="also measure the GIL bound")
    parser.add_argument(
        "--phases", nargs="*", default=["savedmodel", "swap", "reload"], help="phases after steady"
    )
    parser.add_argument(
        "--server-flag", action="append", default=[], help="an extra flag for the server"
    )
    parser.add_argument(
        "--model-process",
        action="store_true",
        help="load the SavedModel in a model process (TensorFlowPlatformOptions.model_process)",
    )
    parser.add_argument(
        "--trace-pauses", action="store_true", help="log the server's GC pauses and stalls"
    )
    parser.add_argument("--gil-probe", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.gil_probe is not None:
        gil_probe(args.gil_probe, args.loads)
        return
    for tool in ("wrk", "h2load"):
        if shutil.which(tool) is None:
            sys.exit(f"bench/lifecycle_latency.py needs {tool}: apt-get install wrk nghttp2-client")
    server_cpus = os.environ.get("SERVINGLIB_BENCH_SERVER_CPUS")
    print_environment("bench/lifecycle_latency.py: one model's latency during lifecycle work")
    print(
        f"server on CPU {server_cpus or 'any (not pinned)'}, clients on CPU "
        f"{os.environ.get('SERVINGLIB_BENCH_CLIENT_CPUS', 'any')}; {args.seconds} s per protocol "
        f"and phase at concurrency {args.concurrency}; server flags {args.server_flag or 'none'}; "
        "server GIL switch interval "
        f"{os.environ.get('SERVINGLIB_BENCH_SWITCH_INTERVAL_MS', 'default')} ms; "
        f"load average at start {os.getloadavg()[0]:.2f}"
    )
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        rig = Rig(tmp, args)
        started = time.perf_counter()
        write_savedmodel(rig.big, args.savedmodel_mb)
        size = sum(f.stat().st_size for f in rig.big.rglob("*") if f.is_file()) / 2**20
        print(
            f"\n1. Wrote the SavedModel ({size:.0f} MB, {SAVEDMODEL_VARIABLES} variables) in "
            f"{time.perf_counter() - started:.1f} s; 100 + 2 Python models"
        )
        server, context = rig.start(server_cpus)
        try:
            cycles_of = {
                "savedmodel": (
                    "savedmodel (own process)" if args.model_process else "savedmodel load/unload",
                    rig.savedmodel_cycle,
                ),
                "swap": ("python version swaps", rig.swap_cycle),
                "reload": (f"config reload +-{EXTRA_MODELS}", rig.reload_cycle),
            }
            wrk(rig.rest_port, tmp, args.concurrency, 2)  # warm-up
            h2load(rig.port, tmp, args.concurrency, 2)
            phases = {"steady": measure(rig, args)}
            cycles: dict[str, int] = {}
            for key in args.phases:
                label, cycle = cycles_of[key]
                activity = Activity(lambda stop, c=cycle: c(server, stop))  # type: ignore[misc]
                phases[label] = measure(rig, args)
                cycles[label] = activity.stop()
            loads = os.getloadavg()
            print(f"{INDENT}load average at the end {loads[0]:.2f} {loads[1]:.2f} {loads[2]:.2f}")
        finally:
            context.__exit__(None, None, None)  # type: ignore[attr-defined]
        report(phases, cycles)
        report_transitions(server.log)
        if args.trace_pauses:
            report_pauses(server.log, list(phases), rig.windows)
        if args.gil:
            gil_bound(args, rig.big, server_cpus)


if __name__ == "__main__":
    main()
