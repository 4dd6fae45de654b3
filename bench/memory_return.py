"""Benchmark: does the server give memory back to the OS after a burst of large gRPC requests?

For each variant (allocator settings in the environment, servinglib's ``--malloc_trim``), a
fresh ``python -m servinglib`` serving a model that sums its float32 input (``--model``: a
Python model, or a SavedModel, whose server also holds TensorFlow) gets a few small Predicts
(its idle RSS), then a burst of large Predicts (``--megabytes`` each, from ``--concurrency``
client threads), then nothing for ``--settle-seconds``; its RSS then is compared with the idle
RSS (target: at most 1.5 x).  ``--busy-cores`` spins that many processes meanwhile, as on a
loaded machine.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from _common import INDENT, print_environment, print_target, rss_bytes, wait_for_answer
from _servers import free_port, running

# bench/grpc.py, beside this file, would shadow grpcio: drop this directory from sys.path first.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import grpc  # noqa: E402

from servinglib.protos import predict_pb2  # noqa: E402

SUM_MODEL_PY = '''
import numpy as np
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    """float32 [n] -> its sum, [1]: the answer is small, the request is not."""

    @signature(name="serving_default", inputs=[TensorSpec("x", np.float32, [-1])],
               outputs=[TensorSpec("y", np.float32, [1])])
    def predict(self, x):
        return {"y": np.array([x.sum()], dtype=np.float32)}
'''
WRITE_SAVED_MODEL_PY = """
import sys
import tensorflow as tf

class Summer(tf.Module):
    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    def predict(self, x):
        return {"y": tf.reshape(tf.reduce_sum(x), [1])}

module = Summer()
tf.saved_model.save(module, sys.argv[1], signatures={"serving_default": module.predict})
"""
PREDICT = "/tensorflow.serving.PredictionService/Predict"
MIB = 1 << 20
TARGET_RATIO = 1.5

# label, extra flags, extra environment
VARIANTS: list[tuple[str, list[str], dict[str, str]]] = [
    ("glibc defaults", ["--malloc_trim=false"], {}),
    ("MALLOC_ARENA_MAX=2", ["--malloc_trim=false"], {"MALLOC_ARENA_MAX": "2"}),
    (
        "MALLOC_MMAP_THRESHOLD_=1MiB",
        ["--malloc_trim=false"],
        {"MALLOC_MMAP_THRESHOLD_": str(MIB)},
    ),
    ("--malloc_trim (servinglib's default)", [], {}),
]
TF_POOL = "TF_ONEDNN_USE_SYSTEM_ALLOCATOR"
SAVED_MODEL_VARIANTS: list[tuple[str, list[str], dict[str, str]]] = [
    ("--malloc_trim, TF's oneDNN pool kept", [], {TF_POOL: "0"}),
]
"""With a SavedModel: the trimmer with TensorFlow's own pool left on (servinglib turns it off)."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=100, help="size of each large request")
    parser.add_argument("--requests", type=int, default=16, help="large requests in the burst")
    parser.add_argument("--concurrency", type=int, default=4, help="client threads")
    parser.add_argument("--settle-seconds", type=float, default=10.0, help="wait after the burst")
    parser.add_argument("--only", help="run only the variants whose label contains this")
    parser.add_argument("--model", choices=["python", "savedmodel"], default="python")
    parser.add_argument("--busy-cores", type=int, default=0, help="processes spinning meanwhile")
    args = parser.parse_args()
    print_environment("bench/memory_return.py: RSS after a burst of large gRPC Predicts")
    print(
        f"{args.requests} Predicts of {args.megabytes} MiB from {args.concurrency} threads to a "
        f"{args.model} model; RSS read {args.settle_seconds:g} s after the burst; "
        f"{args.busy_cores} busy cores; load average {os.getloadavg()[0]:.2f}"
    )
    large = _request(args.megabytes * MIB // 4)
    small = _request(16)
    print(
        f"\n1. RSS (MiB) by variant, and the burst's duration (s)\n"
        f"{INDENT}{'variant':<38}{'idle':>8}{'peak':>8}{'after':>8}{'burst':>8}"
    )
    variants = VARIANTS + (SAVED_MODEL_VARIANTS if args.model == "savedmodel" else [])
    results = []
    with tempfile.TemporaryDirectory() as tmp, _busy(args.busy_cores):
        config = _write_model(Path(tmp), args.model)
        for label, flags, environment in variants:
            if args.only and args.only not in label:
                continue
            idle, peak, after, burst_s = _measure(
                config, Path(tmp), (flags, environment), (large, small), args
            )
            print(
                f"{INDENT}{label:<38}{idle / MIB:>8.0f}{peak / MIB:>8.0f}{after / MIB:>8.0f}"
                f"{burst_s:>8.1f}"
            )
            results.append((label, idle, after))
    print()
    for label, idle, after in results:
        ratio = after / idle
        print_target(
            ratio <= TARGET_RATIO,
            f"{label}: RSS {args.settle_seconds:g} s after the burst = {ratio:.2f} x idle "
            f"(target <= {TARGET_RATIO})",
        )


def _write_model(root: Path, model: str) -> Path:
    version = root / "summer" / "1"
    if model == "python":
        version.mkdir(parents=True)
        (version / "model.py").write_text(SUM_MODEL_PY)
    else:  # in a process of its own: TensorFlow stays out of the client's RSS and threads
        subprocess.run(
            [sys.executable, "-c", WRITE_SAVED_MODEL_PY, str(version)],
            check=True,
            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},  # TF's banner stays off the table
            stderr=subprocess.DEVNULL,
        )
    platform = "python" if model == "python" else "tensorflow"
    config = root / "models.config"
    config.write_text(
        'model_config_list { config { name: "summer" base_path: '
        f'"{root / "summer"}" model_platform: "{platform}" }} }}\n'
    )
    return config


@contextmanager
def _busy(cores: int) -> Iterator[None]:
    """``cores`` processes spinning until the block ends: the load the issue's miss had."""
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(cores)]
    for spinner in spinners:
        spinner.start()
    try:
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.join()


def _spin() -> None:
    while True:
        pass


def _request(elements: int) -> bytes:
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "summer"
    tensor = request.inputs["x"]
    tensor.dtype = 1  # DT_FLOAT
    tensor.tensor_shape.dim.add(size=elements)
    tensor.tensor_content = bytes(elements * 4)
    return request.SerializeToString()


def _measure(
    config: Path,
    tmp: Path,
    variant: tuple[list[str], dict[str, str]],
    requests: tuple[bytes, bytes],
    args: Any,  # noqa: ANN401 - the parsed arguments
) -> tuple[int, int, int, float]:
    """Idle, peak and settled RSS of a server started with ``variant``'s flags and environment.

    And the burst's duration in seconds.
    """
    flags, environment = variant
    large, small = requests
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "servinglib",
        f"--port={port}",
        "--grpc_host=127.0.0.1",
        f"--model_config_file={config}",
        "--allow_python_code_execution",
        *flags,
    ]
    os.environ.update(environment)
    try:
        channel = grpc.insecure_channel(
            f"127.0.0.1:{port}",
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
            started = time.monotonic()
            with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
                list(pool.map(lambda _i: predict(large, timeout=300), range(args.requests)))
            burst_s = time.monotonic() - started
            peak = rss_bytes(p.pid, "VmHWM")
            time.sleep(args.settle_seconds)  # the measured quantity is RSS after this idle time
            return idle, peak, rss_bytes(p.pid, "VmRSS"), burst_s
    finally:
        for name in environment:
            del os.environ[name]


if __name__ == "__main__":
    main()
