"""Publishing a version however people do it: it serves once complete, and nothing fails meanwhile.

Each test serves version 1 of a model from a ServerCore (the real file-system
source, polls every 1 s as the CLI, a settle window of 1 s: the CLI's 0.5 s
default took a writer's pause between two chunks for a finished file once, on a
machine loaded by two test processes),
keeps 8 client threads predicting, publishes version 2 with a real writer
and checks that version 2 answers once its writer is done, that no request
failed and that no load failed on the way (or, where the files are broken
on purpose, that the version heals when they are fixed).
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import publishers
import pytest

from servinglib import FileSystemStoragePathSourceConfig, LoadRetryOptions, ManagerOptions
from servinglib.core.servable_state import ManagerState, ServableState
from servinglib.loaders.python import PythonPlatformConfig
from servinglib.servable import call_signature
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.model_spec import ModelSpec
from servinglib.server.server_core import ServerCore
from servinglib.server.server_core_options import ServerCoreOptions
from servinglib.testing import wait_until

TIMEOUT_S = 60.0  # a loaded machine: generous, and only ever waited on a condition
SETTLE_WINDOW_S = 1.0
WEIGHTS_BYTES = 1 << 20
CLIENTS = 8


@pytest.fixture(scope="module", params=["python", "tensorflow"])
def exports(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Exports:
    """Versions answering 1x and 2x, written once per platform, outside any base path."""
    platform = str(request.param)
    root = tmp_path_factory.mktemp(f"exports-{platform}")
    if platform == "tensorflow":
        pytest.importorskip("tensorflow")
        write = publishers.write_saved_model
    else:
        write = publishers.write_python_model
    return Exports(platform, {f: write(root / str(f), f, WEIGHTS_BYTES) for f in (1, 2)})


class Exports:
    """A platform's model exports by the factor they multiply by."""

    def __init__(self, platform: str, by_factor: dict[int, Path]) -> None:
        self.platform = platform
        self.by_factor = by_factor


class Clients:
    """8 threads predicting on the latest version until stopped, recording answers and failures."""

    def __init__(self, core: ServerCore) -> None:
        self._core = core
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.failures: list[BaseException] = []  # guarded by: _lock
        self.factors: set[float] = set()  # guarded by: _lock
        self.requests = 0  # guarded by: _lock
        self._threads = [
            threading.Thread(target=self._run, name=f"client-{i}") for i in range(CLIENTS)
        ]

    def __enter__(self) -> Clients:
        for thread in self._threads:
            thread.start()
        wait_until(lambda: self.requests >= CLIENTS, TIMEOUT_S)
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(TIMEOUT_S)

    def _run(self) -> None:
        x = np.array([1.0, 3.0], np.float32)
        while not self._stop.is_set():
            try:
                with self._core.servable_handle(ModelSpec.latest("m")) as handle:
                    y = call_signature(handle.servable, None, {"x": x})["y"]
                factor = float(y[1] / 3.0)
            except Exception as exc:  # noqa: BLE001 - every failure is what the test asserts on
                with self._lock:
                    self.failures.append(exc)
                continue
            with self._lock:
                self.requests += 1
                self.factors.add(factor)


class Rig:
    """A ServerCore serving version 1 of ``m`` from ``base``, with every failed load recorded."""

    def __init__(self, exports: Exports, base: Path) -> None:
        self.base = base
        self.events: list[ServableState] = []  # appended by the core's threads
        shutil.copytree(exports.by_factor[1], base / "1")  # before the core: no need to be slow

        self.core = ServerCore(
            ModelServerConfig((ModelConfig("m", str(base), model_platform=exports.platform),)),
            ServerCoreOptions(
                platform_configs={"python": PythonPlatformConfig(allow_code_execution=True)},
                manager=ManagerOptions(load_retry=LoadRetryOptions(max_num_load_retries=0)),
                source=FileSystemStoragePathSourceConfig(settle_window_s=SETTLE_WINDOW_S),
                servable_state_waiter_timeout_s=TIMEOUT_S,
            ),
            state_listeners=[self.events.append],
        )

    @property
    def failed_loads(self) -> list[ServableState]:
        return [e for e in self.events if e.manager_state is ManagerState.END and e.health]

    def states(self, version: int) -> list[ManagerState]:
        return [e.manager_state for e in self.events if e.id.version == version]

    def answers(self, factor: float) -> bool:
        with self.core.servable_handle(ModelSpec.latest("m")) as handle:
            y = call_signature(handle.servable, None, {"x": np.array([3.0], np.float32)})["y"]
        return bool(float(y[0]) == 3.0 * factor)

    def close(self) -> None:
        self.core.close()


@pytest.fixture
def rig(exports: Exports, tmp_path: Path) -> Iterator[Rig]:
    made = Rig(exports, tmp_path / "models" / "m")
    yield made
    made.close()


@pytest.mark.parametrize("method", sorted(publishers.PUBLISHERS))
def test_each_publishing_method_serves_the_new_version_without_a_failure(
    rig: Rig, method: str, exports: Exports
) -> None:
    """Published by cp -r, rsync, tar -x or write-then-mv, version 2 serves; nothing fails."""
    with Clients(rig.core) as clients:
        _publish_from_a_process_of_its_own(method, exports.by_factor[2], rig.base, 2)
        wait_until(lambda: rig.answers(2.0), TIMEOUT_S, f"version 2 never served ({method})")
        served = clients.requests
        wait_until(lambda: clients.requests >= served + CLIENTS, TIMEOUT_S)
    assert clients.failures == []
    assert rig.failed_loads == []
    assert clients.factors == {1.0, 2.0}


def _publish_from_a_process_of_its_own(method: str, source: Path, base: Path, version: int) -> None:
    """Publishes as a user's ``cp``, ``rsync`` or ``tar`` does: from a process of its own, so
    that the clients' threads here never hold the writer back (a writer paused past the settle
    window looks finished: a writer thread starved of this process's interpreter once was)."""
    code = (
        "import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]); "
        "import publishers; "
        "publishers.PUBLISHERS[sys.argv[2]](Path(sys.argv[3]), Path(sys.argv[4]), int(sys.argv[5]))"
    )
    here = str(Path(publishers.__file__).parent)
    arguments = [here, method, str(source), str(base), str(version)]
    subprocess.run([sys.executable, "-c", code, *arguments], check=True, timeout=TIMEOUT_S)


def test_truncated_variables_file_loads_once_completed(rig: Rig, exports: Exports) -> None:
    """A version whose big file is half written waits (or fails) and serves once it is complete."""
    target = rig.base / "2"
    source = exports.by_factor[2]
    biggest = max((p for p in source.rglob("*") if p.is_file()), key=lambda p: p.stat().st_size)
    with Clients(rig.core) as clients:
        staging = rig.base.parent / "staging"
        shutil.copytree(source, staging)
        data = biggest.read_bytes()
        (staging / biggest.relative_to(source)).write_bytes(data[: len(data) // 2])
        staging.rename(target)
        if exports.platform == "tensorflow":
            _wait_past_settle_windows(rig)
        else:
            wait_until(lambda: rig.failed_loads != [], TIMEOUT_S, "the short weights.bin loaded")
        assert rig.answers(1.0)
        (target / biggest.relative_to(source)).write_bytes(biggest.read_bytes())
        wait_until(lambda: rig.answers(2.0), TIMEOUT_S, "the completed version never served")
    assert clients.failures == []
    if exports.platform == "tensorflow":  # the index says how big each shard must be
        assert rig.failed_loads == []
    else:  # model.py is there, so it loads, fails on its short weights.bin, then heals
        assert [s.id.version for s in rig.failed_loads] == [2]


def test_writer_that_dies_leaves_the_old_version_serving(rig: Rig, exports: Exports) -> None:
    """A writer dying half-way leaves version 1 serving; version 2 never serves."""
    source = exports.by_factor[2]
    biggest = max(p.stat().st_size for p in source.rglob("*") if p.is_file())
    with Clients(rig.core) as clients:
        publishers.copy_slowly(source, rig.base / "2", die_after_bytes=biggest // 3)
        if exports.platform == "tensorflow":
            _wait_past_settle_windows(rig)
        else:
            wait_until(lambda: rig.failed_loads != [], TIMEOUT_S, "the short weights.bin loaded")
        assert rig.answers(1.0)
    assert clients.failures == []
    assert clients.factors == {1.0}
    if exports.platform == "tensorflow":
        assert rig.states(2) == []  # never aspired
    else:
        status = rig.core.model_status("m", 2).versions[0]
        assert status.error is not None
        assert "loads again when its files change" in status.error.message


def test_version_directory_deleted_while_settling_is_dropped(
    rig: Rig, exports: Exports, caplog: pytest.LogCaptureFixture
) -> None:
    """A half-written version deleted while it waits is forgotten; version 1 keeps serving."""
    source = exports.by_factor[2]
    with caplog.at_level(logging.INFO, logger="servinglib.sources"):
        publishers.copy_slowly(source, rig.base / "2", die_after_bytes=1)
        wait_until(lambda: "waiting for its files" in caplog.text, TIMEOUT_S)
        for path in sorted((rig.base / "2").rglob("*"), reverse=True):
            path.unlink() if path.is_file() else path.rmdir()
        (rig.base / "2").rmdir()
        wait_until(lambda: "went away before it was complete" in caplog.text, TIMEOUT_S)
    assert rig.answers(1.0)
    assert rig.states(2) == []


def _wait_past_settle_windows(rig: Rig) -> None:
    """Lets several settle windows pass (a bound for what must not happen), then polls twice."""
    threading.Event().wait(4 * SETTLE_WINDOW_S)
    source = rig.core._pipeline.source
    source.poll_once()
    source.poll_once()
