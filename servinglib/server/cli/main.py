"""``servinglib-server`` / ``python -m servinglib``: parse the flags, start, serve, exit."""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from types import FrameType

from servinglib.errors import ServingError
from servinglib.server.cli.flags import PROGRAM, FlagError, ServerFlags, parse_flags
from servinglib.server.cli.log_format import configure_logging
from servinglib.server.cli.worker_identity import WorkerIdentity

_log = logging.getLogger("servinglib.server")


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the server; the process exit status.

    0 after a graceful stop; 1 if it cannot start; 3 (EXIT_CUT_OFF) when the
    shutdown grace ended with requests cut off or model calls left running.

    Startup failures (a port in use, a bad config file, models that do not
    load) print one line saying what failed, and exit 1; flag errors exit 2.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if "--version" in args:
        print(_versions())
        return 0
    try:
        flags = parse_flags(args)
    except FlagError as error:
        print(f"{PROGRAM}: error: {error}; see {PROGRAM} --help", file=sys.stderr)
        return 2
    worker = WorkerIdentity.from_environ()
    configure_logging(
        flags.log_level, flags.log_format, worker.index if worker is not None else None
    )
    if worker is None:
        for name in flags.ignored:
            _log.warning(
                "--%s is accepted and ignored: a tuning knob of TF Serving's C++ server", name
            )
        if flags.num_workers > 1:
            return _supervise(flags, args)
    from servinglib.server.cli.model_server import ModelServer

    previous = {signum: signal.signal(signum, _stop_starting) for signum in _STOP_SIGNALS}
    previous[signal.SIGHUP] = signal.signal(signal.SIGHUP, _hangup_while_starting)
    try:
        server = ModelServer(flags, worker)
    except (ServingError, OSError) as error:
        print(f"{PROGRAM}: cannot start: {_one_line(error)}", file=sys.stderr)
        return 1
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    try:
        status = server.run()
    except (ServingError, OSError) as error:
        print(f"{PROGRAM}: cannot serve: {_one_line(error)}", file=sys.stderr)
        return 1
    if server.abandoned_calls:
        # Their threads never end: exit without waiting for them (or for model unloads).
        _log.error("Exiting with model calls still running (status %d)", status)
        logging.shutdown()
        sys.stdout.flush()
        os._exit(status)
    return status


_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def _supervise(flags: ServerFlags, args: list[str]) -> int:
    """``--num_workers``: this process starts the workers and looks after them."""
    from servinglib.server.cli.supervisor import Supervisor

    try:
        supervisor = Supervisor(flags, args)
    except (ServingError, OSError) as error:
        print(f"{PROGRAM}: cannot start: {_one_line(error)}", file=sys.stderr)
        return 1
    return supervisor.run()


def _stop_starting(signum: int, _frame: FrameType | None) -> None:
    """A stop signal while the models load: nothing serves yet, so exit now, without unwinding.

    Unwinding would wait for the loads in flight (a SavedModel load takes seconds).
    """
    print(
        f"{PROGRAM}: {signal.Signals(signum).name} while loading models: stopped", file=sys.stderr
    )
    sys.stderr.flush()
    os._exit(0)


def _hangup_while_starting(_signum: int, _frame: FrameType | None) -> None:
    """SIGHUP before serving: the config is being read anyway; ignore it (it would kill us)."""
    _log.warning("SIGHUP while loading models: ignored (send it again once serving)")


def _one_line(error: BaseException) -> str:
    return " ".join(str(error).split()) or type(error).__name__


def _versions() -> str:
    import servinglib

    parts = [f"servinglib {servinglib.__version__}"]
    for distribution in ("tensorflow-cpu", "tensorflow"):
        try:
            parts.append(f"TensorFlow {version(distribution)}")
            break
        except PackageNotFoundError:
            continue
    else:
        parts.append("TensorFlow not installed")
    return f"{PROGRAM}: " + ", ".join(parts)
