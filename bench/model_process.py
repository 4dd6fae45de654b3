"""Benchmark: what one call to a model process costs, against the same call in-process.

A trivial Python model (``y = x * 2`` on ``--floats`` float32s, 4 by default) is loaded
with ``PythonLoader`` in this process and with ``ProcessLoader`` in a model process, and
called through ``Servable.call``:

1. one call at a time: µs of wall time per call, and µs of CPU per call (this process's and,
   for the model process, its own too, from ``/proc``);
2. 8 threads calling at once for ``--seconds``: calls per second.

``--tree DIR`` (repeatable) measures the servinglib checkout in DIR (an older commit's
worktree for "before"), each in a process of its own with DIR on PYTHONPATH; the trees'
passes are interleaved, so drift on a shared machine hits them alike, and the best pass of
each is kept.  Without ``--tree``, this checkout.  Prints one table; no target.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

MODEL_PY = """
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    @signature(name="serving_default", inputs=[TensorSpec("x", "float32", [-1])],
               outputs=[TensorSpec("y", "float32", [-1])])
    def predict(self, x):
        return {"y": x * 2}
"""
X = {"x": np.arange(4, dtype=np.float32)}  # (--floats sets it)
THREADS = 8


def _cpu_s(pid: int) -> float:
    """The CPU time (user + system) process ``pid`` has used, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _sequential(servable: Any, calls: int, pid: int | None) -> tuple[float, float]:  # noqa: ANN401
    """µs of wall time and of CPU (this process's and ``pid``'s) per call."""
    for _ in range(200):
        servable.call("serving_default", X)
    cpu = time.process_time() + (_cpu_s(pid) if pid else 0.0)
    start = time.perf_counter()
    for _ in range(calls):
        servable.call("serving_default", X)
    wall = time.perf_counter() - start
    cpu = time.process_time() + (_cpu_s(pid) if pid else 0.0) - cpu
    return wall / calls * 1e6, cpu / calls * 1e6


def _concurrent(servable: Any, seconds: float) -> float:  # noqa: ANN401
    """Calls per second from THREADS threads calling for ``seconds``."""
    counts = [0] * THREADS
    stop = time.perf_counter() + seconds

    def run(i: int) -> None:
        while time.perf_counter() < stop:
            servable.call("serving_default", X)
            counts[i] += 1

    threads = [threading.Thread(target=run, args=(i,)) for i in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(counts) / seconds


def measure(calls: int, seconds: float, floats: int) -> dict[str, float]:
    """One pass of this checkout (the one on sys.path): its figures by name."""
    X["x"] = np.arange(floats, dtype=np.float32)
    from servinglib.loaders.process import ProcessLoader
    from servinglib.loaders.python import PythonLoader, PythonPlatformConfig
    from servinglib.loaders.warmup import WarmupOptions
    from servinglib.testing import write_python_model

    config = PythonPlatformConfig(allow_code_execution=True, warmup=WarmupOptions(enabled=False))
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        path = str(write_python_model(tmp, "model", MODEL_PY) / "1")
        here = PythonLoader(path, config)
        there = ProcessLoader(path, "servinglib.loaders.python:PythonLoader", config)
        for name, loader in (("in-process", here), ("model process", there)):
            loader.load()
            try:
                servable = loader.servable()
                pid = getattr(servable, "pid", None)
                wall, cpu = _sequential(servable, calls, pid)
                figures[f"{name} wall µs"] = wall
                figures[f"{name} CPU µs"] = cpu
                figures[f"{name} calls/s x{THREADS}"] = _concurrent(servable, seconds)
            finally:
                loader.unload()
    return figures


def _pass(tree: str, args: argparse.Namespace) -> dict[str, float]:
    environment = {**os.environ, "PYTHONPATH": tree}
    command = [
        sys.executable,
        __file__,
        "--worker",
        f"--calls={args.calls}",
        f"--seconds={args.seconds}",
        f"--floats={args.floats}",
    ]
    output = subprocess.run(
        command, env=environment, cwd=tree, check=True, capture_output=True, text=True
    ).stdout
    figures: dict[str, float] = json.loads(output.strip().splitlines()[-1])
    return figures


def _label(tree: str) -> str:
    """The tree's commit (hash and subject), or its path outside git."""
    if not (Path(tree) / ".git").exists():
        return tree
    commit = subprocess.run(
        ["git", "-C", tree, "log", "-1", "--format=%h %s"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    return commit or tree


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", action="append", help="a servinglib checkout (repeatable)")
    parser.add_argument("--calls", type=int, default=3000, help="sequential calls per pass")
    parser.add_argument("--seconds", type=float, default=3.0, help="of 8 threads per pass")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--floats", type=int, default=4, help="float32s in and out per call")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(json.dumps(measure(args.calls, args.seconds, args.floats)))
        return
    trees = args.tree or [str(Path(__file__).resolve().parent.parent)]
    best: dict[str, dict[str, float]] = {tree: {} for tree in trees}
    for _ in range(args.passes):
        for tree in trees:
            for name, value in _pass(tree, args).items():
                keep = max if name.endswith("calls/s x8") else min
                best[tree][name] = keep(value, best[tree].get(name, value))
    print(
        f"CPU affinity {sorted(os.sched_getaffinity(0))}; {args.floats} float32s in and out; "
        f"best of {args.passes} passes"
    )
    print(f"   {'checkout':<44} {'wall µs':>8} {'CPU µs':>8} {'calls/s x8':>11}")
    rows = [("in-process (first checkout)", best[trees[0]], "in-process")]
    rows += [(_label(tree), best[tree], "model process") for tree in trees]
    for label, row, where in rows:
        print(
            f"   {label[:44]:<44} {row[f'{where} wall µs']:>8.0f} {row[f'{where} CPU µs']:>8.0f} "
            f"{row[f'{where} calls/s x{THREADS}']:>11.0f}"
        )
    base = best[trees[0]]
    for tree in trees[1:]:
        ratios = ", ".join(
            f"{figure} {best[tree][name] / base[name]:.2f}x"
            for figure in ("wall µs", "CPU µs", f"calls/s x{THREADS}")
            for name in [f"model process {figure}"]
        )
        print(f"   {_label(tree)[:44]} against the first: {ratios}")


if __name__ == "__main__":
    main()
