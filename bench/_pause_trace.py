"""``python bench/_pause_trace.py ARGS``: ``python -m servinglib ARGS``, logging the pauses it has.

Two kinds, one line each on stderr (the server's log), with ``time.monotonic()`` stamps:

- ``PAUSE gc gen=G ms=M collected=N`` for every garbage collection of at least 2 ms (from
  ``gc.callbacks``; a collection holds the GIL throughout, so every thread waits for it);
- ``PAUSE stall ms=M`` whenever a thread that asks to wake every millisecond wakes at least
  5 ms late: the interpreter was held by something else (a collection, a C extension holding
  the GIL, ...) or the CPU was taken.

bench/lifecycle_latency.py starts the server through this file with ``--trace-pauses`` and
sums the lines per phase.
"""

from __future__ import annotations

import gc
import runpy
import sys
import threading
import time
from pathlib import Path
from typing import Any

GC_MIN_MS = 2.0
STALL_MIN_MS = 5.0

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
    while True:
        asked = time.monotonic()
        time.sleep(0.001)
        late_ms = (time.monotonic() - asked) * 1e3 - 1.0
        if late_ms >= STALL_MIN_MS:
            stamp = time.monotonic()
            print(f"PAUSE stall ms={late_ms:.1f} t={stamp:.3f}", file=sys.stderr, flush=True)


def main() -> None:
    # bench/grpc.py would shadow grpcio: this file's directory leaves the import path.
    here = Path(__file__).resolve().parent
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != here]
    gc.callbacks.append(_on_gc)
    threading.Thread(target=_watch_stalls, name="pause-trace", daemon=True).start()
    sys.argv = ["servinglib", *sys.argv[1:]]
    runpy.run_module("servinglib", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
