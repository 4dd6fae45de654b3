"""Benchmark: stateful sequences (Triton's sequence batcher), servinglib against Triton.

The accumulator of tests/triton/sequence_models.py (a running sum per sequence, keyed by its
CORRID control input) with the oldest strategy (``max_candidate_sequences: 64``,
``max_batch_size: 16``, 1 ms queue delay), served from one Triton repository by the
``tritonserver`` of the ``nvidia-pytriton`` wheel and by ``python -m servinglib``, each pinned to
the server CPU in turn. The client runs on the other CPU, over each protocol in turn: gRPC, one
grpc.aio channel (pre-serialized V2 ``ModelInferRequest``s, so the client's own cost stays
small); HTTP, a keep-alive connection per sequence (pre-built V2 JSON requests written on raw
asyncio streams, for the same reason). 64 concurrent sequences of 20 steps each, every step sent
when the previous answer of its sequence arrived, every answer checked (its running sum).
Figures per server and protocol, best of ``--passes`` rounds: steps per second, p50 and p99 per
step, and requests per model call (the V2 statistics' successes over executions). Target
(issue 35): servinglib >= Triton's steps per second and p99.

Run with ``./dev bench sequences``; needs the Triton that ``./dev setup`` installs.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson
from _common import INDENT, percentile, print_environment, print_target
from _servers import ROOT

# bench/grpc.py, beside this file, would shadow grpcio: drop this directory from sys.path now
# that the helpers beside it are imported.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(ROOT))
import grpc  # noqa: E402

sys.path.insert(0, str(_HERE))  # grpcio imported: bench/triton.py's servers are ours to use
from triton import (  # noqa: E402
    SERVINGLIB_FLAGS,
    Server,
    add_servinglib_flag,
    require_triton_and_load_generators,
    servinglib,
    statistics,
    triton,
)

from servinglib.protos import grpc_service_pb2 as v2  # noqa: E402
from tests.triton.sequence_models import write_accumulator  # noqa: E402

MODEL = "accumulator"
SEQUENCES = 64
STEPS = 20
STRATEGY = (
    "oldest { max_candidate_sequences: 64 preferred_batch_size: [ 16 ] "
    "max_queue_delay_microseconds: 1000 }"
)
INFER = "/inference.GRPCInferenceService/ModelInfer"


def step_request(sequence: int, step: int) -> bytes:
    """Step ``step`` of sequence ``sequence`` (ids from 1), adding ``step + 1``."""
    request = v2.ModelInferRequest(model_name=MODEL)
    request.inputs.add(name="INPUT", datatype="INT32", shape=[1, 1])
    request.raw_input_contents.append(np.array([[step + 1]], np.int32).tobytes())
    request.outputs.add(name="OUTPUT")
    request.parameters["sequence_id"].int64_param = sequence  # as tritonclient sends it
    if step == 0:
        request.parameters["sequence_start"].bool_param = True
    if step == STEPS - 1:
        request.parameters["sequence_end"].bool_param = True
    return request.SerializeToString()


def http_step_request(sequence: int, step: int) -> bytes:
    """:func:`step_request` as an HTTP/1.1 V2 JSON request (keep-alive)."""
    parameters: dict[str, object] = {"sequence_id": sequence}
    if step == 0:
        parameters["sequence_start"] = True
    if step == STEPS - 1:
        parameters["sequence_end"] = True
    body = orjson.dumps(
        {
            "inputs": [{"name": "INPUT", "datatype": "INT32", "shape": [1, 1], "data": [step + 1]}],
            "outputs": [{"name": "OUTPUT"}],
            "parameters": parameters,
        }
    )
    head = (
        f"POST /v2/models/{MODEL}/infer HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    return head.encode() + body


def _check(base: int, index: int, step: int, got: int) -> None:
    if got != (step + 1) * (step + 2) // 2:
        raise RuntimeError(f"sequence {base + index}: step {step} summed to {got}")


async def run_grpc_round(
    port: int, base: int, requests: list[list[bytes]]
) -> tuple[float, list[float]]:
    """The round's seconds and each step's latency (s); raises on a wrong running sum."""
    latencies: list[float] = []
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(INFER)

        async def sequence(index: int) -> None:
            for step, data in enumerate(requests[index]):
                started = time.perf_counter()
                reply = v2.ModelInferResponse.FromString(await call(data, timeout=60))
                latencies.append(time.perf_counter() - started)
                _check(
                    base, index, step, int(np.frombuffer(reply.raw_output_contents[0], np.int32)[0])
                )

        started = time.perf_counter()
        await asyncio.gather(*(sequence(i) for i in range(SEQUENCES)))
        return time.perf_counter() - started, latencies


async def run_http_round(
    port: int, base: int, requests: list[list[bytes]]
) -> tuple[float, list[float]]:
    """:func:`run_grpc_round` over HTTP: a keep-alive connection per sequence."""
    latencies: list[float] = []
    connections = [await asyncio.open_connection("127.0.0.1", port) for _ in range(SEQUENCES)]

    async def sequence(index: int) -> None:
        reader, writer = connections[index]
        for step, data in enumerate(requests[index]):
            started = time.perf_counter()
            writer.write(data)
            head = await reader.readuntil(b"\r\n\r\n")
            status = head.split(b" ", 2)[1]
            length = int(head.lower().split(b"content-length:", 1)[1].split(b"\r\n", 1)[0])
            body = await reader.readexactly(length)
            latencies.append(time.perf_counter() - started)
            if status != b"200":
                raise RuntimeError(f"sequence {base + index}: step {step}: {status!r} {body!r}")
            _check(base, index, step, int(orjson.loads(body)["outputs"][0]["data"][0]))

    started = time.perf_counter()
    try:
        await asyncio.gather(*(sequence(i) for i in range(SEQUENCES)))
    finally:
        for _, writer in connections:
            writer.close()
    return time.perf_counter() - started, latencies


def measure(server: Server, protocol: str, passes: int, round_index: list[int]) -> dict[str, float]:
    """Steps/s, p50/p99 (ms) of the best round, and requests per model call over all."""
    best: dict[str, float] = {}
    before = statistics(server, MODEL)
    for _ in range(passes):
        base = 1 + round_index[0] * SEQUENCES
        round_index[0] += 1
        if protocol == "grpc":
            requests = [[step_request(base + s, k) for k in range(STEPS)] for s in range(SEQUENCES)]
            seconds, latencies = asyncio.run(run_grpc_round(server.grpc_port, base, requests))
        else:
            requests = [
                [http_step_request(base + s, k) for k in range(STEPS)] for s in range(SEQUENCES)
            ]
            seconds, latencies = asyncio.run(run_http_round(server.http_port, base, requests))
        rate = SEQUENCES * STEPS / seconds
        if rate > best.get("steps_per_s", 0.0):
            ordered = sorted(latencies)
            best = {
                "steps_per_s": rate,
                "p50_ms": 1e3 * percentile(ordered, 0.50),
                "p99_ms": 1e3 * percentile(ordered, 0.99),
            }
    after = statistics(server, MODEL)
    best["requests_per_call"] = (after[0] - before[0]) / max(after[1] - before[1], 1)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument(
        "--passes", type=int, default=8, help="rounds per server (of ~0.3 s each); best kept"
    )
    parser.add_argument(
        "--protocol", choices=("grpc", "http"), action="append", help="default: both"
    )
    add_servinglib_flag(parser)
    args = parser.parse_args()
    protocols = args.protocol or ["grpc", "http"]
    SERVINGLIB_FLAGS.extend(args.servinglib_flag)
    require_triton_and_load_generators("bench/sequences.py")
    print_environment("bench/sequences.py: 64 sequences x 20 steps, oldest strategy")
    cpus = os.environ.get("SERVINGLIB_BENCH_SERVER_CPUS")
    print(f"{INDENT}servers on CPU {cpus or 'any'}; client on the others")
    figures: dict[tuple[str, str], dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        repository = tmp / "models"
        write_accumulator(repository, MODEL, max_batch_size=16, strategy=STRATEGY)
        for start in (triton, servinglib):
            with start(repository, tmp, cpus) as server:
                round_index = [0]
                for protocol in protocols:
                    measure(server, protocol, 1, round_index)  # warm-up
                    figures[server.name, protocol] = measure(
                        server, protocol, args.passes, round_index
                    )
    print(
        f"\n{INDENT}{'server':<11} {'protocol':<8} {'steps/s':>8} {'p50 ms':>7} {'p99 ms':>7} "
        f"{'req/call':>8}"
    )
    for (server, protocol), f in figures.items():
        print(
            f"{INDENT}{server:<11} {protocol:<8} {f['steps_per_s']:>8.0f} {f['p50_ms']:>7.2f} "
            f"{f['p99_ms']:>7.2f} {f['requests_per_call']:>8.1f}"
        )
    for protocol in protocols:
        ours, theirs = figures["servinglib", protocol], figures["Triton", protocol]
        rate = ours["steps_per_s"] / theirs["steps_per_s"]
        print_target(rate >= 1.0, f"{protocol} steps per second: {rate:.2f}x Triton's (>= 1x)")
        p99 = ours["p99_ms"] / theirs["p99_ms"]
        print_target(p99 <= 1.0, f"{protocol} p99 per step: {p99:.2f}x Triton's (<= 1x)")


if __name__ == "__main__":
    main()
