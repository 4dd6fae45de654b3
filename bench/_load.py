"""The load generators the benchmarks drive: wrk (HTTP/1.1) and h2load (gRPC over HTTP/2).

Both are C programs on the client's CPU, so what they measure is the server, not a Python
client.  h2load counts every HTTP 200 as a success, also a gRPC error (a non-zero
``grpc-status`` trailer): a benchmark compares its count with the server's own.
"""

from __future__ import annotations

import os
import re
import struct
import subprocess
from collections.abc import Sequence
from pathlib import Path

# wrk's script: the request, then (in done) one machine-readable line for this script.
WRK_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local auth = os.getenv("SERVINGLIB_BENCH_AUTHORIZATION")
if auth then wrk.headers["Authorization"] = auth end
local f = assert(io.open(os.getenv("SERVINGLIB_BENCH_BODY"), "rb"))
wrk.body = f:read("*a")
f:close()

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "SERVINGLIB requests=%d duration_us=%d non2xx=%d connect=%d read=%d write=%d timeout=%d",
    summary.requests, summary.duration, e.status, e.connect, e.read, e.write, e.timeout))
  for _, p in ipairs({50, 90, 99, 99.9}) do
    io.write(string.format(" p%s=%d", p, latency:percentile(p)))
  end
  io.write(string.format(" max=%d\\n", latency.max))
end
"""


def wrk(
    port: int,
    path: str,
    body: Path,
    script: Path,
    *,
    concurrency: int,
    seconds: float,
    authorization: str | None = None,
) -> dict[str, float]:
    """Runs wrk once; the figures of its ``SERVINGLIB`` line (latencies in µs).

    ``authorization``: an ``Authorization`` header every request carries."""
    command = [
        "wrk",
        "--threads=1",
        f"--connections={concurrency}",
        f"--duration={max(1, round(seconds))}s",
        "--timeout=10s",
        "--latency",
        f"--script={script}",
        f"http://127.0.0.1:{port}{path}",
    ]
    environment = {**os.environ, "SERVINGLIB_BENCH_BODY": str(body)}
    if authorization is not None:
        environment["SERVINGLIB_BENCH_AUTHORIZATION"] = authorization
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=environment)
    line = re.search(r"^SERVINGLIB (.*)$", done.stdout, re.MULTILINE)
    if done.returncode != 0 or line is None:
        raise RuntimeError(f"wrk failed: {done.stdout}\n{done.stderr}")
    return {key: float(value) for key, value in re.findall(r"(\S+)=(\S+)", line.group(1))}


def grpc_frame(message: bytes) -> bytes:
    """A gRPC length-prefixed message: not compressed, 4-byte big-endian length."""
    return b"\0" + struct.pack(">I", len(message)) + message


def h2load(
    port: int,
    path: str,
    body: Path,
    *,
    concurrency: int,
    seconds: float,
    log: Path | None,
    multiplexed: bool = False,
    headers: Sequence[str] = (),
) -> tuple[int, int, float]:
    """Runs h2load; (succeeded, failed, measured seconds).

    ``concurrency`` requests outstanding: one on each of as many connections,
    or, ``multiplexed``, all as streams of one connection (``-c1 -m N``).
    ``headers``: more ``name: value`` headers (gRPC metadata) on every request.
    """
    clients, streams = (1, concurrency) if multiplexed else (concurrency, 1)
    command = [
        "h2load",
        f"--clients={clients}",
        f"--max-concurrent-streams={streams}",
        "--threads=1",
        f"--duration={seconds:g}",
        f"--data={body}",
        "--header=content-type: application/grpc",
        "--header=te: trailers",
        *(f"--header={header}" for header in headers),
    ]
    if log is not None:
        log.unlink(missing_ok=True)  # h2load appends to it
        command.append(f"--log-file={log}")
    command.append(f"http://127.0.0.1:{port}{path}")
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    match = re.search(r"(\d+) succeeded, (\d+) failed", done.stdout)
    took = re.search(r"finished in ([\d.]+)(m?s)", done.stdout)
    if done.returncode != 0 or match is None or took is None:
        raise RuntimeError(f"h2load failed: {done.stdout}\n{done.stderr}")
    elapsed = float(took.group(1)) / (1000 if took.group(2) == "ms" else 1)
    return int(match.group(1)), int(match.group(2)), elapsed
