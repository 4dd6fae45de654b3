"""Supervisor: ``--num_workers N`` runs N whole servers on the same ports and looks after them."""

from __future__ import annotations

import contextlib
import logging
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from types import FrameType
from typing import final

import attrs

from servinglib.server.cli.flags import PROGRAM, ServerFlags
from servinglib.server.cli.ports import check_ports
from servinglib.server.cli.worker_identity import WorkerIdentity
from servinglib.server.observe.worker_metrics import forget_gauges

_log = logging.getLogger("servinglib.server")

_BACKOFF_S = (1.0, 2.0, 4.0, 8.0, 16.0, 30.0)
_STEADY_S = 30.0  # a worker that served this long restarts after the first backoff again
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_HANDLED = (*_STOP_SIGNALS, signal.SIGHUP, signal.SIGCHLD)


@final
class Supervisor:
    """Starts ``flags.num_workers`` workers running ``argv`` and supervises them until stopped.

    Construction checks the ports are free (raising UnavailableError naming
    the port); :meth:`run` starts the workers and returns the exit status.
    Not thread-safe: :meth:`run` is called once, from the main thread.
    """

    def __init__(self, flags: ServerFlags, argv: Sequence[str]) -> None:
        check_ports(flags)
        self._flags = flags
        self._argv = list(argv)
        self._workers = [_Worker(index) for index in range(flags.num_workers)]
        self._directory = ""
        self._pending: list[int] = []  # signals received, handled by the loop
        self._stops = 0
        self._serving = False  # every worker has been ready once
        self._exit_status = 0

    def run(self) -> int:
        """Serves with the workers until a stop signal; 0 when every worker stopped cleanly."""
        self._directory = tempfile.mkdtemp(prefix="servinglib-workers-")
        wake_read, wake_write = os.pipe()
        os.set_blocking(wake_read, False)
        os.set_blocking(wake_write, False)
        previous = {signum: signal.signal(signum, self._on_signal) for signum in _HANDLED}
        previous_wakeup = signal.set_wakeup_fd(wake_write)
        try:
            for worker in self._workers:
                self._start(worker)
            _log.info("Starting %d workers", len(self._workers))
            return self._supervise(wake_read)
        finally:
            for worker in self._workers:
                worker.kill()
            signal.set_wakeup_fd(previous_wakeup)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            os.close(wake_read)
            os.close(wake_write)
            shutil.rmtree(self._directory, ignore_errors=True)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self._pending.append(signum)

    def _supervise(self, wake_read: int) -> int:
        while True:
            ready_fds = [w.ready_fd for w in self._workers if w.ready_fd is not None]
            readable, _, _ = select.select([wake_read, *ready_fds], [], [], self._timeout_s())
            if wake_read in readable:
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_read, 4096)
            for worker in self._workers:
                if worker.ready_fd is not None and worker.ready_fd in readable:
                    self._on_ready(worker)
            failed = self._handle_signals() or self._reap()
            if failed is not None:
                return failed
            if self._stops:
                if not any(w.running for w in self._workers):
                    return self._exit_status
                continue
            now = time.monotonic()
            for worker in self._workers:
                if worker.restart_at is not None and worker.restart_at <= now:
                    self._start(worker)

    def _timeout_s(self) -> float | None:
        restarts = [w.restart_at for w in self._workers if w.restart_at is not None]
        if not restarts or self._stops:
            return None  # signals and exits (SIGCHLD) wake the loop
        return max(0.0, min(restarts) - time.monotonic())

    def _start(self, worker: _Worker) -> None:
        read_fd, write_fd = os.pipe()
        identity = WorkerIdentity(worker.index, self._directory, write_fd)
        try:
            worker.process = subprocess.Popen(
                [sys.executable, "-m", "servinglib", *self._argv],
                env={**os.environ, **identity.environ()},
                pass_fds=(write_fd,),
                # Terminal signals reach the supervisor alone, which passes them on.
                start_new_session=True,
                preexec_fn=_stop_with_parent,  # noqa: PLW1509 - the supervisor runs no threads
            )
        finally:
            os.close(write_fd)
        worker.ready_fd = read_fd
        worker.started_at = time.monotonic()
        worker.restart_at = None

    def _on_ready(self, worker: _Worker) -> None:
        assert worker.ready_fd is not None
        assert worker.process is not None
        said = os.read(worker.ready_fd, 1)
        os.close(worker.ready_fd)
        worker.ready_fd = None
        if not said:
            return  # it exited before it was ready: _reap sees it
        worker.ready_at = time.monotonic()
        _log.info("Worker %d (pid %d) serves", worker.index, worker.process.pid)
        if not self._serving and all(w.ready_at is not None for w in self._workers):
            self._serving = True
            pids = ", ".join(str(w.process.pid) for w in self._workers if w.process is not None)
            _log.info("Serving with %d workers (pids %s)", len(self._workers), pids)

    def _handle_signals(self) -> int | None:
        while self._pending:
            signum = self._pending.pop(0)
            name = signal.Signals(signum).name
            if signum == signal.SIGHUP and not self._stops:
                _log.info("SIGHUP: passed on to every worker")
                self._signal_all(signal.SIGHUP)
            elif signum in _STOP_SIGNALS:
                self._stops += 1
                for worker in self._workers:
                    worker.restart_at = None
                if self._stops == 1:
                    _log.info("%s: stopping %d workers (each drains)", name, len(self._workers))
                    self._signal_all(signum)
                else:
                    _log.warning("Second %s: killing the workers", name)
                    self._exit_status = 1
                    self._signal_all(signal.SIGKILL)
        return None

    def _signal_all(self, signum: int) -> None:
        for worker in self._workers:
            if worker.running:
                assert worker.process is not None  # running
                with contextlib.suppress(ProcessLookupError):
                    worker.process.send_signal(signum)

    def _reap(self) -> int | None:
        """Handles workers that exited; the exit status if the server cannot start."""
        for worker in self._workers:
            process = worker.process
            if process is None or process.poll() is None:
                continue
            status = process.returncode
            worker.process = None
            if worker.ready_fd is not None:
                os.close(worker.ready_fd)
                worker.ready_fd = None
            forget_gauges(self._directory, worker.index)
            served = worker.ready_at is not None
            worker.ready_at = None
            if self._stops:
                # One still starting may die of the stop signal before it handles signals.
                stopped_starting = not served and -status in _STOP_SIGNALS
                if status != 0 and not stopped_starting:
                    _log.warning("Worker %d (pid %d) %s", worker.index, process.pid, _how(status))
                    self._exit_status = max(self._exit_status, status if status > 0 else 1)
                continue
            if not self._serving:
                return self._start_failed(worker, status)
            _log.error(
                "Worker %d (pid %d) %s; starting it again", worker.index, process.pid, _how(status)
            )
            if served and time.monotonic() - worker.started_at >= _STEADY_S:
                worker.failures = 0
            delay_s = _BACKOFF_S[min(worker.failures, len(_BACKOFF_S) - 1)]
            worker.failures += 1
            worker.restart_at = time.monotonic() + delay_s
        return None

    def _start_failed(self, worker: _Worker, status: int) -> int:
        print(
            f"{PROGRAM}: cannot start: worker {worker.index} {_how(status)} "
            "(its error is above); stopping the others",
            file=sys.stderr,
        )
        self._stops += 1
        self._signal_all(signal.SIGTERM)
        deadline_s = self._flags.drain_delay_seconds + self._flags.shutdown_grace_seconds + 30
        for other in self._workers:
            if other.process is not None:
                try:
                    other.process.wait(deadline_s)
                except subprocess.TimeoutExpired:
                    other.kill()
        return 1


@attrs.define
class _Worker:
    """One worker slot: its process (None between a death and its restart) and its history."""

    index: int
    process: subprocess.Popen[bytes] | None = None
    ready_fd: int | None = None  # the read end of its ready pipe, until it said ready
    started_at: float = 0.0
    ready_at: float | None = None
    failures: int = 0  # restarts since it last served steadily
    restart_at: float | None = None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def _how(status: int) -> str:
    if status < 0:
        return f"was killed by {signal.Signals(-status).name}"
    return f"exited with status {status}"


def _stop_with_parent() -> None:
    """In the worker before it runs: SIGTERM it if the supervisor dies (Linux), so none is left."""
    if sys.platform != "linux":
        return
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGTERM)
