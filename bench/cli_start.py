"""Benchmark: servinglib-server's cold start to ready, against `import tensorflow` alone; idle RSS.

Each round, interleaved so drift on a shared machine hits both alike:

1. ``python -c "import tensorflow"``: the floor of any server that loads a SavedModel;
2. ``servinglib-server --model_name=half_plus_two --model_base_path=<bundled example>
   --rest_api_port=<free>``, from process start until ``GET /v2/health/ready`` answers 200
   (the model loaded and warmed up, REST and gRPC listening);
3. the same with ``--demo`` (both bundled models), then its resident memory (VmRSS) at idle,
   against the RSS of a process that has only imported TensorFlow.

Prints medians over ``--rounds`` and the ratio of the server's start to the import (what
servinglib adds: Python imports, the SavedModel load, warmup, servers). No target: the issue
asks for the figures. Run with ``./dev bench cli_start``.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request

from _common import INDENT, print_environment
from _servers import free_port

from servinglib.examples import HALF_PLUS_TWO

ENV = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
START_TIMEOUT_S = 120.0


def time_import() -> float:
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import tensorflow"], env=ENV, check=True)
    return time.perf_counter() - started


def rss_of_import() -> int:
    code = (
        "import tensorflow, re; "
        "print(re.search(r'VmRSS:\\s+(\\d+)', open('/proc/self/status').read())[1])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=ENV, check=True, capture_output=True, text=True
    )
    return int(done.stdout.strip()) * 1024


def start_server(*flags: str) -> tuple[float, int]:
    """Seconds from spawn to ready, and the RSS (bytes) once ready and idle."""
    port = free_port()
    started = time.perf_counter()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "servinglib",
            f"--rest_api_port={port}",
            "--rest_api_host=127.0.0.1",
            "--port=0",
            "--log_level=WARNING",
            *flags,
        ],
        env=ENV,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = started + START_TIMEOUT_S
    try:
        while True:
            try:
                url = f"http://127.0.0.1:{port}/v2/health/ready"
                with urllib.request.urlopen(url, timeout=1) as ready:
                    if ready.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError):
                pass
            if process.poll() is not None:
                raise RuntimeError(f"the server exited with {process.returncode}")
            if time.perf_counter() > deadline:
                raise RuntimeError(f"the server was not ready within {START_TIMEOUT_S:g} s")
            time.sleep(0.01)
        elapsed = time.perf_counter() - started
        time.sleep(0.5)  # idle
        with open(f"/proc/{process.pid}/status", encoding="ascii") as status:
            line = next(x for x in status if x.startswith("VmRSS:"))
        return elapsed, int(line.split()[1]) * 1024
    finally:
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print_environment("bench/cli_start.py: servinglib-server cold start and idle memory")
    imports, starts, demo_starts, demo_rss, import_rss = [], [], [], [], []
    for _ in range(args.rounds):
        imports.append(time_import())
        elapsed, _rss = start_server(
            "--model_name=half_plus_two", f"--model_base_path={HALF_PLUS_TWO}"
        )
        starts.append(elapsed)
        elapsed, rss = start_server("--demo")
        demo_starts.append(elapsed)
        demo_rss.append(rss)
        import_rss.append(rss_of_import())
    mib = 1024 * 1024
    imp, start, demo = (statistics.median(x) for x in (imports, starts, demo_starts))
    print(f"{INDENT}medians of {args.rounds} rounds:")
    print(f"{INDENT}  import tensorflow alone:                      {imp:6.2f} s")
    for label, figure in (("half_plus_two", start), ("--demo (both examples)", demo)):
        text = f"cold start to ready, {label}:"
        print(f"{INDENT}  {text:<45}{figure:6.2f} s  ({figure / imp:.2f}x the import)")
    rss, base = statistics.median(demo_rss), statistics.median(import_rss)
    print(f"{INDENT}  RSS at idle, --demo:                          {rss / mib:6.0f} MiB")
    print(f"{INDENT}  RSS of a process that imported tensorflow:    {base / mib:6.0f} MiB")
    print(f"{INDENT}  servinglib's share (servers, models, pools):  {(rss - base) / mib:6.0f} MiB")


if __name__ == "__main__":
    main()
