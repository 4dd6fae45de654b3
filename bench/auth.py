"""What restricted API groups cost on the request path: auth on against auth off, c=8.

Two ``python -m servinglib`` servers over the same trivial Python model: one open, one with
``inference,metadata,statistics`` locked on both transports behind a bearer token read from a
file (``@PATH``: the check's ``stat`` included). V2 infer over REST (wrk) and gRPC ``ModelInfer``
(h2load), 8 connections each; every request carries the header, so both servers read the same
bytes. Passes interleave the two servers and keep each cell's best req/s (drift and the other
load on the machine only ever slow a cell down). Target (issue 38): auth on at most 3 % slower.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
from _common import print_environment, print_target
from _load import WRK_LUA, grpc_frame, h2load, wrk
from _servers import TRIVIAL_MODELS, free_port, pinned, running, write_trivial_models

from servinglib.protos import grpc_service_pb2

CONCURRENCY = 8
TARGET_SLOWDOWN = 0.03
TOKEN = "Bearer bench-0123456789abcdef0123456789abcdef"
GROUPS = "inference,metadata,statistics"
MODEL = TRIVIAL_MODELS["thread"]
INPUT = np.arange(16, dtype=np.float32).reshape(1, 16)
REST_PATH = f"/v2/models/{MODEL}/infer"
GRPC_PATH = "/inference.GRPCInferenceService/ModelInfer"
START_TIMEOUT_S = 60.0


def rest_body() -> bytes:
    tensor = {"name": "x", "datatype": "FP32", "shape": list(INPUT.shape)}
    return json.dumps({"inputs": [{**tensor, "data": INPUT.ravel().tolist()}]}).encode()


def grpc_body() -> bytes:
    request = grpc_service_pb2.ModelInferRequest(model_name=MODEL)
    request.inputs.add(name="x", datatype="FP32", shape=INPUT.shape)
    request.raw_input_contents.append(INPUT.tobytes())
    return grpc_frame(request.SerializeToString())


def command(tmp: Path, config: Path, grpc_port: int, rest_port: int, locked: bool) -> list[str]:
    flags = [
        sys.executable, "-m", "servinglib", "--allow_python_code_execution",
        f"--model_config_file={config}", f"--port={grpc_port}", "--grpc_host=127.0.0.1",
        f"--rest_api_port={rest_port}", "--rest_api_host=127.0.0.1", "--log_level=WARNING",
    ]  # fmt: skip
    if locked:
        token = tmp / "token"
        token.write_text(TOKEN + "\n")
        flags += [
            f"--http_restricted_api={GROUPS}:authorization=@{token}",
            f"--grpc_restricted_protocol={GROUPS}:authorization=@{token}",
        ]
    return flags


def rest_status(port: int, authorization: str | None) -> int:
    headers = {"content-type": "application/json"}
    if authorization is not None:
        headers["authorization"] = authorization
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{REST_PATH}", rest_body(), headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return error.code


def wait_ready(port: int) -> object:
    def wait(process: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            if process.poll() is not None:
                raise RuntimeError("the server exited")
            try:
                if rest_status(port, TOKEN) == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"no server on port {port}")
            time.sleep(0.1)

    return wait


def wrk_rps(port: int, tmp: Path, seconds: float) -> float:
    body, script = tmp / "body.json", tmp / "post.lua"
    body.write_bytes(rest_body())
    script.write_text(WRK_LUA)
    figures = wrk(
        port,
        REST_PATH,
        body,
        script,
        concurrency=CONCURRENCY,
        seconds=seconds,
        authorization=TOKEN,
    )
    if figures["non2xx"]:
        raise RuntimeError(f"wrk: {figures['non2xx']:.0f} answers were not 2xx")
    return figures["requests"] / (figures["duration_us"] / 1e6)


def h2load_rps(port: int, tmp: Path, seconds: float) -> float:
    body = tmp / "body.grpc"
    body.write_bytes(grpc_body())
    succeeded, failed, elapsed = h2load(
        port,
        GRPC_PATH,
        body,
        concurrency=CONCURRENCY,
        seconds=seconds,
        log=None,
        headers=[f"triton-grpc-protocol-authorization: {TOKEN}"],
    )
    if failed:
        raise RuntimeError(f"h2load: {failed} requests failed")
    return succeeded / elapsed


GRPC_CHECK = """
import sys, grpc
port, path, body = sys.argv[1], sys.argv[2], bytes.fromhex(sys.argv[3])
metadata = [tuple(m.split("=", 1)) for m in sys.argv[4:]]
with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
    try:
        channel.unary_unary(path)(body, timeout=10, metadata=metadata)
        print("OK")
    except grpc.RpcError as error:
        print(error.code().name)
"""


def grpc_code(port: int, *metadata: str) -> str:
    """The status of one ModelInfer with ``key=value`` metadata (a process of its own: this
    directory's grpc.py hides grpcio here)."""
    done = subprocess.run(
        [sys.executable, "-c", GRPC_CHECK, str(port), GRPC_PATH, grpc_body()[5:].hex(), *metadata],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    return done.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="each measured run")
    parser.add_argument(
        "--passes",
        type=int,
        default=3,
        help="interleaved passes (order swapped each pass); best kept",
    )
    args = parser.parse_args()
    server_cpus = os.environ.get("SERVINGLIB_BENCH_SERVER_CPUS")
    if server_cpus is None and shutil.which("taskset") and len(os.sched_getaffinity(0)) >= 2:
        server_cpus = str(min(os.sched_getaffinity(0)))
    print_environment("bench/auth.py: restricted API groups on the request path (c=8)")
    print(f"server on CPU {server_cpus or 'any'}; {args.passes} passes of {args.seconds:g} s")
    with tempfile.TemporaryDirectory() as name:
        tmp = Path(name)
        config = write_trivial_models(tmp)
        ports = {locked: (free_port(), free_port()) for locked in (False, True)}
        servers = [
            running(
                pinned(command(tmp, config, *ports[locked], locked), server_cpus),
                tmp / f"server-{locked}.log",
                wait_ready(ports[locked][1]),  # type: ignore[arg-type]
            )
            for locked in (False, True)
        ]
        with servers[0], servers[1]:
            grpc_on, rest_on = ports[True]
            assert rest_status(rest_on, None) == 401
            assert rest_status(rest_on, "x") == 403
            assert grpc_code(grpc_on) == "UNAUTHENTICATED"
            assert grpc_code(grpc_on, f"triton-grpc-protocol-authorization={TOKEN}") == "OK"
            best: dict[tuple[str, bool], float] = {}
            for number in range(args.passes):
                for transport, measure in (("REST", wrk_rps), ("gRPC", h2load_rps)):
                    # Each pass swaps which server goes first, so neither gains by its place.
                    for locked in (False, True) if number % 2 == 0 else (True, False):
                        port = ports[locked][1 if transport == "REST" else 0]
                        rps = measure(port, tmp, args.seconds)
                        best[transport, locked] = max(rps, best.get((transport, locked), 0.0))
    for transport in ("REST", "gRPC"):
        off, on = best[transport, False], best[transport, True]
        slowdown = 1 - on / off
        print(f"{transport:5} auth off {off:8.0f} req/s   auth on {on:8.0f} req/s   "
              f"on/off {on / off:.3f}")  # fmt: skip
        print_target(
            slowdown <= TARGET_SLOWDOWN,
            f"{transport} with auth at most {TARGET_SLOWDOWN:.0%} slower: {slowdown:+.1%}",
        )


if __name__ == "__main__":
    main()
