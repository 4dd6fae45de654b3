"""Benchmark: stateful sequences (Triton's sequence batcher), servinglib against Triton.

The accumulator of tests/triton/sequence_models.py (a running sum per sequence, keyed by its
CORRID control input) with the oldest strategy (``max_candidate_sequences: 64``,
``max_batch_size: 16``, 1 ms queue delay), served from one Triton repository by the
``tritonserver`` of the ``nvidia-pytriton`` wheel and by ``python -m servinglib``, each pinned to
the server CPU in turn. The client is one grpc.aio channel on the other CPU (pre-serialized V2
``ModelInferRequest``s, so the client's own cost stays small): 64 concurrent sequences of 20
steps each, every step sent when the previous answer of its sequence arrived, every answer
checked (its running sum). Figures per server, best of ``--passes`` rounds: steps per second,
p50 and p99 per step, and requests per model call (the V2 statistics' successes over
executions). Target (issue 35): servinglib >= Triton's steps per second and p99.

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
    Server,
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


async def run_round(port: int, base: int, requests: list[list[bytes]]) -> tuple[float, list[float]]:
    """The round's seconds and each step's latency (s); raises on a wrong running sum."""
    latencies: list[float] = []
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(INFER)

        async def sequence(index: int) -> None:
            for step, data in enumerate(requests[index]):
                started = time.perf_counter()
                reply = v2.ModelInferResponse.FromString(await call(data, timeout=60))
                latencies.append(time.perf_counter() - started)
                got = int(np.frombuffer(reply.raw_output_contents[0], np.int32)[0])
                if got != (step + 1) * (step + 2) // 2:
                    raise RuntimeError(f"sequence {base + index}: step {step} summed to {got}")

        started = time.perf_counter()
        await asyncio.gather(*(sequence(i) for i in range(SEQUENCES)))
        return time.perf_counter() - started, latencies


def measure(port: int, http_port: int, passes: int, round_index: list[int]) -> dict[str, float]:
    """Steps/s, p50/p99 (ms) of the best round, and requests per model call over all."""
    best: dict[str, float] = {}
    counted = Server("", http_port, 0, 0)
    before = statistics(counted, MODEL)
    for _ in range(passes):
        base = 1 + round_index[0] * SEQUENCES
        round_index[0] += 1
        requests = [[step_request(base + s, k) for k in range(STEPS)] for s in range(SEQUENCES)]
        seconds, latencies = asyncio.run(run_round(port, base, requests))
        rate = SEQUENCES * STEPS / seconds
        if rate > best.get("steps_per_s", 0.0):
            ordered = sorted(latencies)
            best = {
                "steps_per_s": rate,
                "p50_ms": 1e3 * percentile(ordered, 0.50),
                "p99_ms": 1e3 * percentile(ordered, 0.99),
            }
    after = statistics(counted, MODEL)
    best["requests_per_call"] = (after[0] - before[0]) / max(after[1] - before[1], 1)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--passes", type=int, default=3, help="rounds per server; best kept")
    args = parser.parse_args()
    require_triton_and_load_generators("bench/sequences.py")
    print_environment("bench/sequences.py: 64 sequences x 20 steps, oldest strategy, gRPC")
    cpus = os.environ.get("SERVINGLIB_BENCH_SERVER_CPUS")
    print(f"{INDENT}servers on CPU {cpus or 'any'}; client on the others")
    figures: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        repository = tmp / "models"
        write_accumulator(repository, MODEL, max_batch_size=16, strategy=STRATEGY)
        for start in (triton, servinglib):
            with start(repository, tmp, cpus) as server:
                round_index = [0]
                measure(server.grpc_port, server.http_port, 1, round_index)  # warm-up
                figures[server.name] = measure(
                    server.grpc_port, server.http_port, args.passes, round_index
                )
    print(f"\n{INDENT}{'server':<11} {'steps/s':>8} {'p50 ms':>7} {'p99 ms':>7} {'req/call':>8}")
    for server, f in figures.items():
        print(
            f"{INDENT}{server:<11} {f['steps_per_s']:>8.0f} {f['p50_ms']:>7.2f} "
            f"{f['p99_ms']:>7.2f} {f['requests_per_call']:>8.1f}"
        )
    ours, theirs = figures["servinglib"], figures["Triton"]
    rate = ours["steps_per_s"] / theirs["steps_per_s"]
    print_target(rate >= 1.0, f"steps per second: {rate:.2f}x Triton's (>= 1x)")
    p99 = ours["p99_ms"] / theirs["p99_ms"]
    print_target(p99 <= 1.0, f"p99 per step: {p99:.2f}x Triton's (<= 1x)")


if __name__ == "__main__":
    main()
