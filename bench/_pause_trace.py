"""``python bench/_pause_trace.py ARGS``: ``python -m servinglib ARGS``, logging the pauses it has.

Two kinds, one line each on stderr (the server's log), with ``time.monotonic()`` stamps:

- ``PAUSE gc gen=G ms=M collected=N`` for every garbage collection of at least 2 ms (from
  ``gc.callbacks``; a collection holds the GIL throughout, so every thread waits for it);
- ``PAUSE stall ms=M`` whenever a thread that asks to wake every millisecond wakes at least
  5 ms late: the interpreter was held by something else (a collection, a C extension holding
  the GIL, ...) or the CPU was taken; after a stall of 20 ms or more, a ``BUSY`` line names
  each thread that used 10 ms of CPU or more since the last sample (every 50 ms, from
  ``/proc``), with its innermost frames (a thread that held the GIL is where it let go).

bench/lifecycle_latency.py starts the server through this file with ``--trace-pauses`` and
sums the lines per phase.  ``SERVINGLIB_BENCH_SWITCH_INTERVAL_MS`` sets the server's GIL switch
interval (``sys.setswitchinterval``) for an experiment; ``SERVINGLIB_BENCH_TRACE=0`` then leaves
the tracing out.
"""

from __future__ import annotations

import gc
import os
import runpy
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

GC_MIN_MS = 2.0
STALL_MIN_MS = 5.0
STACK_MIN_MS = 20.0  # stalls this long also print every thread's innermost frames
STACK_DEPTH = 4
CPU_SAMPLE_S = 0.05  # threads' CPU times are sampled this often
BUSY_MIN_MS = 10.0  # a thread that ran this long since the sample is named after a stall
_TICKS_PER_S = os.sysconf("SC_CLK_TCK")

_started: list[float] = [0.0]


def _on_gc(phase: str, info: dict[str, Any]) -> None:
    now = time.monotonic()
    if phase == "start":
        _started[0] = now
        return
    took_ms = (now - _started[0]) * 1e3
    if took_ms >= GC_MIN_MS:
        print(
            f"PAUSE gc gen={info['generation']} ms={took_ms:.1f} "
            f"collected={info['collected']} t={now:.3f}",
            file=sys.stderr,
            flush=True,
        )


def _watch_stalls() -> None:
    cpu = _thread_cpu_ms()
    sampled = time.monotonic()
    while True:
        asked = time.monotonic()
        time.sleep(0.001)
        now = time.monotonic()
        late_ms = (now - asked) * 1e3 - 1.0
        if late_ms >= STALL_MIN_MS:
            print(f"PAUSE stall ms={late_ms:.1f} t={now:.3f}", file=sys.stderr, flush=True)
            if late_ms >= STACK_MIN_MS:
                _print_busy(now, cpu)
        if now - sampled >= CPU_SAMPLE_S:
            cpu, sampled = _thread_cpu_ms(), now


def _thread_cpu_ms() -> dict[int, float]:
    """CPU time (user + system, ms) of each thread of this process, by native thread id."""
    times = {}
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
        except OSError:  # the thread ended
            continue
        times[int(task)] = (int(fields[11]) + int(fields[12])) * 1e3 / _TICKS_PER_S
    return times


def _print_busy(stamp: float, before: dict[int, float]) -> None:
    """The threads that ran during a long stall (CPU since the last sample) and where they are."""
    after = _thread_cpu_ms()
    threads = {t.native_id: t for t in threading.enumerate()}
    frames = sys._current_frames()  # noqa: SLF001 - the documented way to see other threads
    for native, used in after.items():
        ran_ms = used - before.get(native, 0.0)
        if ran_ms < BUSY_MIN_MS or native == threading.get_native_id():
            continue
        thread = threads.get(native)
        name = thread.name.replace(" ", "_") if thread is not None else f"native-{native}"
        frame = frames.get(thread.ident) if thread is not None and thread.ident else None
        where = (
            " < ".join(
                f"{Path(f.filename).name}:{f.lineno}:{f.name}"
                for f in traceback.extract_stack(frame)[::-1][:STACK_DEPTH]
            )
            if frame is not None
            else "(no Python frame: a thread of a C library)"
        )
        print(f"BUSY t={stamp:.3f} ms={ran_ms:.0f} {name} {where}", file=sys.stderr, flush=True)


def main() -> None:
    # bench/grpc.py would shadow grpcio: this file's directory leaves the import path.
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    interval_ms = os.environ.get("SERVINGLIB_BENCH_SWITCH_INTERVAL_MS")
    if interval_ms:  # an experiment: how long a thread may hold the GIL while another waits
        sys.setswitchinterval(float(interval_ms) / 1e3)
    if os.environ.get("SERVINGLIB_BENCH_TRACE", "1") != "0":
        gc.callbacks.append(_on_gc)
        threading.Thread(target=_watch_stalls, name="pause-trace", daemon=True).start()
    sys.argv = ["servinglib", *sys.argv[1:]]
    runpy.run_module("servinglib", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
