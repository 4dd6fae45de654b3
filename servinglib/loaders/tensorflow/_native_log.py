"""routed_native_log: TensorFlow's C++ log lines at import go to Python logging, not stderr."""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import re
import sys
import threading
from collections.abc import Iterator
from typing import Final

_ABSL_LINE: Final = re.compile(rb"^([IWEF])\d{4} [\d:.]+\s+\d+ [^\]]+\] ?(.*)$")
_ABSL_PROSE: Final = (
    b"WARNING: All log messages before absl::InitializeLog()",
    b"To enable the following",  # the second line of the cpu_feature_guard message
)
_LEVELS: Final = {b"I": logging.DEBUG, b"W": logging.WARNING, b"E": logging.ERROR}
_MARK: Final = b"\0servinglib-native-log-end\0\n"

_log = logging.getLogger("tensorflow")


@contextlib.contextmanager
def routed_native_log() -> Iterator[None]:
    """Routes what native code writes to descriptor 2 during the block (module docstring).

    Requires: called from one thread at a time (the import lock does it).
    A process started meanwhile keeps writing through the pipe, whose
    reader passes its lines on until it exits.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 2)
    records: queue.SimpleQueue[tuple[int, str]] = queue.SimpleQueue()
    caught_up = threading.Event()
    pump = threading.Thread(
        target=_pump,
        args=(read_end, saved, records, caught_up),
        name="servinglib-native-log",
        daemon=True,
    )
    pump.start()
    try:
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.write(write_end, _MARK)
        os.close(write_end)
        caught_up.wait(5.0)
        while not records.empty():
            level, text = records.get()
            _log.log(level, "%s", text)


def _pump(
    read_end: int,
    stderr: int,
    records: queue.SimpleQueue[tuple[int, str]],
    caught_up: threading.Event,
) -> None:
    """Reads the pipe until every writer closed it: absl lines to ``records``, the rest on."""
    with os.fdopen(read_end, "rb") as pipe:
        for line in pipe:
            if line == _MARK:
                caught_up.set()
                continue
            parsed = _ABSL_LINE.match(line.rstrip(b"\n"))
            if parsed is not None:
                level = _LEVELS.get(parsed.group(1), logging.ERROR)
                records.put((level, parsed.group(2).decode("utf-8", "replace")))
            elif line.startswith(_ABSL_PROSE):
                records.put((logging.DEBUG, line.rstrip(b"\n").decode("utf-8", "replace")))
            else:
                os.write(stderr, line)
    caught_up.set()
    os.close(stderr)
