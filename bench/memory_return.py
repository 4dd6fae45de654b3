"""Benchmark: does the server give memory back to the OS after a burst of large gRPC requests?

For each variant (allocator settings in the environment, servinglib's ``--malloc_trim``), a
fresh ``python -m servinglib`` serving a Python model that sums its float32 input gets a few
small Predicts (its idle RSS), then a burst of large Predicts (``--megabytes`` each, from
``--concurrency`` client threads), then nothing for ``--settle-seconds``; its RSS then is
compared with the idle RSS (target: at most 1.5 x).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import INDENT, print_environment, print_target
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--megabytes", type=int, default=100, help="size of each large request")
    parser.add_argument("--requests", type=int, default=16, help="large requests in the burst")
    parser.add_argument("--concurrency", type=int, default=4, help="client threads")
    parser.add_argument("--settle-seconds", type=float, default=10.0, help="wait after the burst")
    parser.add_argument("--only", help="run only the variants whose label contains this")
    args = parser.parse_args()
    print_environment("bench/memory_return.py: RSS after a burst of large gRPC Predicts")
    print(
        f"{args.requests} Predicts of {args.megabytes} MiB from {args.concurrency} threads; "
        f"RSS read {args.settle_seconds:g} s after the burst"
    )
    large = _request(args.megabytes * MIB // 4)
    small = _request(16)
    print(f"\n1. RSS (MiB) by variant\n{INDENT}{'variant':<38}{'idle':>8}{'peak':>8}{'after':>8}")
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        config = _write_model(Path(tmp))
        for label, flags, environment in VARIANTS:
            if args.only and args.only not in label:
                continue
            idle, peak, after = _measure(
                config, Path(tmp), (flags, environment), (large, small), args
            )
            print(f"{INDENT}{label:<38}{idle / MIB:>8.0f}{peak / MIB:>8.0f}{after / MIB:>8.0f}")
            results.append((label, idle, after))
    print()
    for label, idle, after in results:
        ratio = after / idle
        print_target(
            ratio <= TARGET_RATIO,
            f"{label}: RSS {args.settle_seconds:g} s after the burst = {ratio:.2f} x idle "
            f"(target <= {TARGET_RATIO})",
        )


def _write_model(root: Path) -> Path:
    version = root / "summer" / "1"
    version.mkdir(parents=True)
    (version / "model.py").write_text(SUM_MODEL_PY)
    config = root / "models.config"
    config.write_text(
        'model_config_list { config { name: "summer" base_path: '
        f'"{root / "summer"}" model_platform: "python" }} }}\n'
    )
    return config


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
) -> tuple[int, int, int]:
    """Idle, peak and settled RSS of a server started with ``variant``'s flags and environment."""
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
        with channel, running(command, tmp / "server.log", lambda _p: _wait(predict, small)) as p:
            for _ in range(5):
                predict(small, timeout=30)
            idle = _rss(p.pid, "VmRSS")
            with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
                list(pool.map(lambda _i: predict(large, timeout=300), range(args.requests)))
            peak = _rss(p.pid, "VmHWM")
            time.sleep(args.settle_seconds)  # the measured quantity is RSS after this idle time
            return idle, peak, _rss(p.pid, "VmRSS")
    finally:
        for name in environment:
            del os.environ[name]


def _wait(predict: Any, small: bytes) -> None:  # noqa: ANN401 - a grpc callable
    deadline = time.monotonic() + 120
    while True:
        try:
            predict(small, timeout=5)
            return
        except grpc.RpcError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _rss(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} for process {pid}")


if __name__ == "__main__":
    main()
