"""Streaming: a model yielding 100 small parts, over gRPC ModelStreamInfer and REST generate_stream.

Runs ``python -m servinglib`` (pinned to the server CPU) with a Python model whose signatures
yield ``--parts`` parts of a few bytes each (a generator on the worker pool, an async generator
on the event loop), and one that returns the same parts as one response. From this process
(the client CPU) it measures, per protocol: parts per second of one stream at a time and of 16
concurrent streams, the time to the first part, and the time of the same parts as one response
(gRPC ModelInfer, REST generate on the whole signature). The clients are Python (grpc.aio with
servinglib's own messages; httpx), so their own cost is part of every figure: compare the rows
of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path

from _common import INDENT, print_environment
from _servers import free_port, pinned, running

# bench/grpc.py, beside this file, would shadow grpcio: drop this directory from sys.path first.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import grpc.aio  # noqa: E402
import httpx  # noqa: E402
import numpy as np  # noqa: E402

from servinglib.protos import grpc_service_pb2 as v2  # noqa: E402

MODEL_PY = """
import asyncio
import numpy as np
from servinglib.loaders import PythonModel, signature
from servinglib.servable import ExecutionMode, TensorSpec

IN = [TensorSpec("n", "int32", [1])]
PART = [TensorSpec("i", "int32", [1]), TensorSpec("text_output", object, [1])]
WHOLE = [TensorSpec("i", "int32", [-1]), TensorSpec("text_output", object, [-1])]


class Model(PythonModel):
    @signature(name="serving_default", inputs=IN, outputs=PART)
    def stream(self, n):
        for k in range(int(n[0])):
            yield {"i": np.array([k], np.int32), "text_output": np.array([b"token "], object)}

    @signature(inputs=IN, outputs=PART, execution_mode=ExecutionMode.ASYNC)
    async def stream_async(self, n):
        for k in range(int(n[0])):
            yield {"i": np.array([k], np.int32), "text_output": np.array([b"token "], object)}

    @signature(inputs=IN, outputs=WHOLE)
    def whole(self, n):
        count = int(n[0])
        return {"i": np.arange(count, dtype=np.int32),
                "text_output": np.array([b"token "] * count, object)}
"""

STREAM_INFER = "/inference.GRPCInferenceService/ModelStreamInfer"
MODEL_INFER = "/inference.GRPCInferenceService/ModelInfer"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--parts", type=int, default=100, help="parts per stream (100)")
    parser.add_argument("--streams", type=int, default=200, help="streams per row (200)")
    parser.add_argument("--concurrency", type=int, default=16, help="concurrent streams (16)")
    args = parser.parse_args()
    print_environment("bench/streaming.py: 100 small parts per stream, gRPC and REST")
    print(f"load: {_uptime()}")
    with tempfile.TemporaryDirectory() as tmp:
        config = _write_model(Path(tmp))
        grpc_port, rest_port = free_port(), free_port()
        command = [
            sys.executable, "-m", "servinglib",
            f"--port={grpc_port}", f"--rest_api_port={rest_port}",
            f"--model_config_file={config}", "--allow_python_code_execution",
            "--grpc_host=127.0.0.1", "--rest_api_host=127.0.0.1",
        ]  # fmt: skip
        cpus = os.environ.get("SERVINGLIB_BENCH_SERVER_CPUS")
        with running(pinned(command, cpus), Path(tmp) / "server.log", _ready(rest_port)):
            asyncio.run(_measure(grpc_port, rest_port, args))
    print(f"load: {_uptime()}")


def _write_model(root: Path) -> Path:
    (root / "parts" / "1").mkdir(parents=True)
    (root / "parts" / "1" / "model.py").write_text(MODEL_PY)
    config = root / "models.config"
    config.write_text(
        f'model_config_list {{ config {{ name: "parts" base_path: "{root / "parts"}" '
        'model_platform: "python" } }'
    )
    return config


def _ready(rest_port: int) -> Callable[[subprocess.Popen[bytes]], None]:
    def wait(process: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError("the server exited")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{rest_port}/v2/health/ready") as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.1)
        raise RuntimeError("the server did not become ready")

    return wait


# One stream's figures: (seconds to the first part, seconds in all, parts).
Sample = tuple[float, float, int]


async def _measure(grpc_port: int, rest_port: int, args: argparse.Namespace) -> None:
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}")
    stream_call = channel.stream_stream(
        STREAM_INFER,
        request_serializer=v2.ModelInferRequest.SerializeToString,
        response_deserializer=v2.ModelStreamInferResponse.FromString,
    )
    infer_call = channel.unary_unary(
        MODEL_INFER,
        request_serializer=v2.ModelInferRequest.SerializeToString,
        response_deserializer=v2.ModelInferResponse.FromString,
    )
    parts = args.parts
    url = f"http://127.0.0.1:{rest_port}/v2/models/parts"
    limits = httpx.Limits(max_connections=args.concurrency * 2)
    async with httpx.AsyncClient(timeout=60, limits=limits) as http:

        async def grpc_stream(signature: str) -> Sample:
            request = _request(parts, signature)
            started = time.perf_counter()
            first, count = 0.0, 0
            async for response in stream_call(iter([request])):
                if response.error_message:
                    raise RuntimeError(response.error_message)
                count += 1
                if count == 1:
                    first = time.perf_counter() - started
            return first, time.perf_counter() - started, count

        async def grpc_whole() -> Sample:
            started = time.perf_counter()
            response = await infer_call(_request(parts, "whole"))
            took = time.perf_counter() - started
            return took, took, len(response.raw_output_contents[0]) // 4

        async def rest_stream(signature: str) -> Sample:
            body = {"n": parts, "parameters": {"signature_name": signature}}
            started = time.perf_counter()
            first, count = 0.0, 0
            async with http.stream("POST", f"{url}/generate_stream", json=body) as response:
                async for line in response.aiter_lines():
                    if line.startswith("data: "):
                        count += 1
                        if count == 1:
                            first = time.perf_counter() - started
            return first, time.perf_counter() - started, count

        async def rest_whole() -> Sample:
            body = {"n": parts, "parameters": {"signature_name": "whole"}}
            started = time.perf_counter()
            response = await http.post(f"{url}/generate", json=body)
            took = time.perf_counter() - started
            return took, took, len(response.json()["i"])

        rows: list[tuple[str, Callable[[], Awaitable[Sample]]]] = [
            ("gRPC stream (thread)", lambda: grpc_stream("serving_default")),
            ("gRPC stream (async)", lambda: grpc_stream("stream_async")),
            ("gRPC one response", grpc_whole),
            ("REST stream (thread)", lambda: rest_stream("serving_default")),
            ("REST stream (async)", lambda: rest_stream("stream_async")),
            ("REST one response", rest_whole),
        ]
        for _, run in rows:  # warm up: connections, imports, the model's first calls
            for _ in range(5):
                await run()
        _print_section(f"1. one stream at a time ({args.streams} streams of {parts} parts)")
        for label, run in rows:
            samples = [await run() for _ in range(args.streams)]
            _print_row(label, samples, sum(s[1] for s in samples))
        _print_section(f"2. {args.concurrency} concurrent streams ({args.streams} in all)")
        for label, run in rows:
            started = time.perf_counter()
            samples = await _concurrently(run, args.streams, args.concurrency)
            _print_row(label, samples, time.perf_counter() - started)
    await channel.close()


async def _concurrently(
    run: Callable[[], Awaitable[Sample]], total: int, concurrency: int
) -> list[Sample]:
    samples: list[Sample] = []

    async def worker(count: int) -> None:
        for _ in range(count):
            samples.append(await run())

    share = [
        total // concurrency + (1 if i < total % concurrency else 0) for i in range(concurrency)
    ]
    await asyncio.gather(*(worker(n) for n in share))
    return samples


def _request(parts: int, signature: str) -> v2.ModelInferRequest:
    request = v2.ModelInferRequest(model_name="parts", id="bench")
    request.parameters["signature_name"].string_param = signature
    request.inputs.add(name="n", datatype="INT32", shape=[1])
    request.raw_input_contents.append(np.array([parts], np.int32).tobytes())
    return request


def _print_section(title: str) -> None:
    print()
    print(title)
    print(f"{INDENT}{'':<24}{'parts/s':>12}{'first p50':>11}{'first p99':>11}{'all p50':>10}")


def _print_row(label: str, samples: list[Sample], seconds: float) -> None:
    parts = sum(s[2] for s in samples)
    firsts = sorted(s[0] * 1e3 for s in samples)
    totals = sorted(s[1] * 1e3 for s in samples)
    print(
        f"{INDENT}{label:<24}{parts / seconds:>12,.0f}"
        f"{firsts[len(firsts) // 2]:>9.2f}ms{firsts[int(len(firsts) * 0.99)]:>9.2f}ms"
        f"{totals[len(totals) // 2]:>8.2f}ms"
    )


def _uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


if __name__ == "__main__":
    main()
