"""Benchmark: what request logging at sampling 1.0 costs in memory and disk under large tensors.

For each variant, a fresh ``python -m servinglib`` serves a Python model answering its float32
input doubled (so each logged record holds the request's and the answer's tensors), with TF
Serving's ``logging_config`` at ``sampling_rate: 1.0`` (or without it). Its idle RSS is read
after a few small Predicts; then ``--concurrency`` client threads, sharing one channel, send
Predicts of ``--megabytes`` for ``--seconds``; the peak RSS (``VmHWM``) is compared with idle,
and the request log's files are summed once the server stopped (its queue written). A server
whose RSS passes ``--rss-limit-mib`` is stopped (the count-only variant, servinglib's bound
before 2026-11-28, grew to 11 GB).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from _common import INDENT, print_environment, print_target, rss_bytes, wait_for_answer
from _servers import free_port, request_log_counts, running

# bench/grpc.py, beside this file, would shadow grpcio: drop this directory from sys.path first.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import grpc  # noqa: E402

from servinglib.protos import predict_pb2  # noqa: E402

DOUBLE_MODEL_PY = """
import numpy as np
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    @signature(name="serving_default", inputs=[TensorSpec("x", np.float32, [-1])],
               outputs=[TensorSpec("y", np.float32, [-1])])
    def predict(self, x):
        return {"y": x * 2}
"""
PREDICT = "/tensorflow.serving.PredictionService/Predict"
MIB = 1 << 20
QUEUE_BOUND_MIB = 256  # --request_log_max_queued_bytes's default

# label, sampling rate (None: no logging_config), extra flags
VARIANTS: list[tuple[str, float | None, list[str]]] = [
    ("logging off", None, []),
    ("sampling 1.0, defaults", 1.0, []),
    ("sampling 1.0, count bound only", 1.0, [f"--request_log_max_queued_bytes={1 << 50}"]),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=8, help="size of each request's tensor")
    parser.add_argument("--concurrency", type=int, default=8, help="client threads, one channel")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of the burst")
    parser.add_argument("--rss-limit-mib", type=int, default=4096, help="stop a server past it")
    parser.add_argument("--only", help="run only the variants whose label contains this")
    args = parser.parse_args()
    print_environment("bench/request_log_memory.py: request logging of large tensors")
    print(
        f"{args.concurrency} threads sending Predicts of {args.megabytes} MiB for "
        f"{args.seconds:g} s; RSS in MiB"
    )
    header = f"{'variant':<34}{'idle':>7}{'peak':>7}{'+peak':>7}{'req':>6}{'logged':>8}"
    print(f"\n{INDENT}{header}{'dropped':>8}{'files MiB':>10}")
    results = []
    for label, rate, flags in VARIANTS:
        if args.only and args.only not in label:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            row = _measure(Path(tmp), rate, flags, args)
        idle, peak, requests, counts, kept, stopped = row
        peak_text = f">{peak / MIB:.0f}" if stopped else f"{peak / MIB:.0f}"
        print(
            f"{INDENT}{label:<34}{idle / MIB:>7.0f}{peak_text:>7}{(peak - idle) / MIB:>7.0f}"
            f"{requests:>6}{counts.get('OK', 0):>8.0f}{counts.get('RESOURCE_EXHAUSTED', 0):>8.0f}"
            f"{kept / MIB:>10.0f}"
        )
        results.append((label, rate, idle, peak, stopped))
    print()
    off = next((peak - idle for label, rate, idle, peak, _ in results if rate is None), None)
    for label, rate, idle, peak, stopped in results:
        if rate is None or off is None:
            continue
        above = (peak - idle - off) / MIB
        print_target(
            not stopped and above <= QUEUE_BOUND_MIB,
            f"{label}: peak RSS {above:.0f} MiB above logging off's "
            f"(target <= the queue's bound, {QUEUE_BOUND_MIB} MiB)",
        )


def _measure(
    tmp: Path,
    rate: float | None,
    flags: list[str],
    args: Any,  # noqa: ANN401 - the parsed arguments
) -> tuple[int, int, int, dict[str, float], int, bool]:
    """Idle and peak RSS, requests sent, log counts, log files' bytes, stopped at the limit."""
    config = _write_model(tmp, rate)
    grpc_port, rest_port = free_port(), free_port()
    command = [
        sys.executable,
        "-m",
        "servinglib",
        f"--port={grpc_port}",
        f"--rest_api_port={rest_port}",
        "--grpc_host=127.0.0.1",
        "--rest_api_host=127.0.0.1",
        "--enable_metrics",
        f"--model_config_file={config}",
        "--allow_python_code_execution",
        *flags,
    ]
    large = _request(args.megabytes * MIB // 4)
    small = _request(16)
    channel = grpc.insecure_channel(
        f"127.0.0.1:{grpc_port}",
        options=[("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)],
    )
    predict = channel.unary_unary(PREDICT)
    with (
        channel,
        running(command, tmp / "server.log", lambda _p: wait_for_answer(predict, small)) as p,
    ):
        for _ in range(5):
            predict(small, timeout=30)
        idle = rss_bytes(p.pid, "VmRSS")
        stop = threading.Event()
        stopped = threading.Event()
        sent = [0]
        watcher = threading.Thread(target=_watch, args=(p, args.rss_limit_mib * MIB, stop, stopped))
        watcher.start()

        def send() -> None:
            deadline = time.monotonic() + args.seconds
            while time.monotonic() < deadline and not stopped.is_set():
                try:
                    predict(large, timeout=60)
                except grpc.RpcError:
                    return
                sent[0] += 1

        clients = [threading.Thread(target=send) for _ in range(args.concurrency)]
        for client in clients:
            client.start()
        for client in clients:
            client.join()
        stop.set()
        watcher.join()
        peak = rss_bytes(p.pid, "VmHWM") if not stopped.is_set() else args.rss_limit_mib * MIB
        counts = {} if stopped.is_set() else request_log_counts(rest_port)
    kept = _log_bytes(tmp)
    return idle, peak, sent[0], counts, kept, stopped.is_set()


def _watch(
    process: Any,  # noqa: ANN401 - a subprocess.Popen
    limit: int,
    stop: threading.Event,
    stopped: threading.Event,
) -> None:
    """Stops ``process`` once its RSS passes ``limit`` bytes, until ``stop`` is set."""
    while not stop.wait(0.1):  # a sampling period, not a wait for a condition
        if rss_bytes(process.pid, "VmRSS") > limit:
            stopped.set()
            process.kill()
            return


def _write_model(root: Path, rate: float | None) -> Path:
    version = root / "double" / "1"
    version.mkdir(parents=True)
    (version / "model.py").write_text(DOUBLE_MODEL_PY)
    logging = ""
    if rate is not None:
        logging = (
            f'logging_config {{ log_collector_config {{ type: "file" filename_prefix: '
            f'"{root / "logs" / "double"}" }} sampling_config {{ sampling_rate: {rate} }} }}'
        )
    config = root / "models.config"
    config.write_text(
        'model_config_list { config { name: "double" base_path: '
        f'"{root / "double"}" model_platform: "python" {logging} }} }}\n'
    )
    return config


def _request(elements: int) -> bytes:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "double"
    tensor = request.inputs["x"]
    tensor.dtype = 1  # DT_FLOAT
    tensor.tensor_shape.dim.add(size=elements)
    tensor.tensor_content = bytes(elements * 4)
    return request.SerializeToString()


def _log_bytes(root: Path) -> int:
    return sum(path.stat().st_size for path in (root / "logs").glob("*.tfrecord"))


if __name__ == "__main__":
    main()
