"""What every benchmark prints alike: the environment header, percentile tables, PASS/MISS lines.

Imported by the scripts beside it (``python bench/NAME.py`` puts this directory on sys.path).
"""

from __future__ import annotations

import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

INDENT = "   "  # tables and notes sit under their numbered section title
CELL_WIDTH = 9


def print_environment(title: str) -> None:
    """Prints ``title``, then what the figures depend on: Python, GIL, CPUs, servinglib commit."""
    print(title)
    print(
        f"python {platform.python_implementation()} {platform.python_version()}, "
        f"GIL switch interval {sys.getswitchinterval() * 1000:.1f} ms, "
        f"CPU affinity {sorted(os.sched_getaffinity(0))} of {os.cpu_count()} CPUs"
    )
    print(f"servinglib at {_code_version()}")


def percentile(ordered: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of an ascending sequence (q in [0, 1])."""
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


class PercentileTable:
    """Formats one row of figures per measured series, and their header.

    ``columns`` name the figures, in order: ``"p50"``, ``"p99.9"`` (any
    percentile), ``"min"`` or ``"max"``; the sample count always ends the row.
    Immutable after construction, so thread-safe.
    """

    def __init__(self, label_width: int, columns: Sequence[str]) -> None:
        self._label_width = label_width
        self._columns = tuple(columns)

    def header(self, label: str = "") -> str:
        """The column headings; ``label`` heads the label column."""
        cells = "".join(f"{h:>{CELL_WIDTH}}" for h in (*self._columns, "n"))
        return f"{INDENT}{label:<{self._label_width}}{cells}"

    def row(self, label: str, samples: Sequence[float]) -> str:
        """``label``, then the figures of ``samples`` (in any order) and their count."""
        ordered = sorted(samples)
        cells = "".join(f"{_figure(ordered, c):>{CELL_WIDTH}.2f}" for c in self._columns)
        return f"{INDENT}{label:<{self._label_width}}{cells}{len(ordered):>{CELL_WIDTH}}"


def print_target(met: bool, text: str) -> None:
    """One verdict line: ``PASS text`` or ``MISS text``. A MISS never fails the run."""
    print(f"{'PASS' if met else 'MISS'} {text}")


def _figure(ordered: Sequence[float], column: str) -> float:
    if column == "min":
        return ordered[0]
    if column == "max":
        return ordered[-1]
    return percentile(ordered, float(column[1:]) / 100)


def _code_version() -> str:
    """The checkout's commit, and whether servinglib/ has changes not committed."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=False)
        return done.stdout.strip()

    try:
        head = git("rev-parse", "--short", "HEAD")
        changed = git("status", "--porcelain", "--", "servinglib")
    except OSError:  # no git
        return "an unknown commit"
    if not head:
        return "an unknown commit"
    return f"{head} + uncommitted changes" if changed else head


def wait_for_answer(call: Callable[..., object], request: object, timeout_s: float = 120) -> None:
    """Returns once ``call(request, timeout=5)`` answers (a gRPC callable of a server starting);
    raises its last grpc.RpcError after ``timeout_s``."""
    import grpc

    deadline = time.monotonic() + timeout_s
    while True:
        try:
            call(request, timeout=5)
            return
        except grpc.RpcError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def rss_bytes(pid: int, field: str = "VmRSS") -> int:
    """A process's memory figure from /proc (``VmRSS``: now; ``VmHWM``: its peak), in bytes."""
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"no {field} for process {pid}")
