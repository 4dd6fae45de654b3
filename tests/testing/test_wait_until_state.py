"""Tests for wait_until_available and wait_until_state: waits by name, clear failure messages."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from servinglib.core.basic_manager import BasicManager, ManagerOptions
from servinglib.core.loader_harness import LoadRetryOptions
from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId
from servinglib.core.servable_state import ManagerState
from servinglib.core.servable_state_monitor import ServableStateMonitor
from servinglib.errors import DataLossError
from servinglib.loaders.python import PythonPlatformConfig
from servinglib.servable import call_signature
from servinglib.server import ModelConfig, ModelServerConfig, ServerCore, ServerCoreOptions
from servinglib.server.model_spec import ModelSpec
from servinglib.testing import (
    FakeLoader,
    make_version_dirs,
    wait_until_available,
    wait_until_state,
)

TIMEOUT_S = 10.0
EXPIRING_S = 0.05  # for waits meant to time out
NO_RETRIES = LoadRetryOptions(max_num_load_retries=0)


@pytest.fixture
def manager() -> Iterator[BasicManager]:
    with BasicManager(ManagerOptions(num_load_threads=1, load_retry=NO_RETRIES)) as manager:
        yield manager


@pytest.fixture
def monitor(manager: BasicManager) -> Iterator[ServableStateMonitor]:
    monitor = ServableStateMonitor(manager.event_bus)
    yield monitor
    monitor.close()


def serve(manager: BasicManager, version: int, loader: FakeLoader) -> None:
    servable_id = ServableId("m", version)
    manager.manage_servable(ServableData.of(servable_id, loader))
    manager.load_servable(servable_id)


def test_returns_the_id_once_a_load_on_another_thread_finishes(
    manager: BasicManager, monitor: ServableStateMonitor
) -> None:
    """A specific version: returns its id when the load thread makes it AVAILABLE."""
    gate = threading.Event()
    loader = FakeLoader(load_gate=gate)
    serve(manager, 3, loader)
    assert loader.load_started.wait(TIMEOUT_S)
    with pytest.raises(TimeoutError):  # still loading: the wait does not return early
        wait_until_available(monitor, "m", 3, timeout_s=0.05)
    gate.set()

    assert wait_until_available(monitor, "m", 3, timeout_s=TIMEOUT_S) == ServableId("m", 3)


def test_any_version_returns_the_highest_available(
    manager: BasicManager, monitor: ServableStateMonitor
) -> None:
    """version=None waits for any version and returns the highest one available."""
    serve(manager, 1, FakeLoader())
    serve(manager, 2, FakeLoader())
    wait_until_available(monitor, "m", 1, timeout_s=TIMEOUT_S)
    wait_until_available(monitor, "m", 2, timeout_s=TIMEOUT_S)

    assert wait_until_available(monitor, "m", timeout_s=TIMEOUT_S) == ServableId("m", 2)


def test_a_failed_load_raises_at_once_with_its_error(
    manager: BasicManager, monitor: ServableStateMonitor
) -> None:
    """A version ending in END fails the wait with AssertionError naming the servable and error."""
    serve(manager, 1, FakeLoader(load_error=DataLossError("checksum mismatch")))

    with pytest.raises(AssertionError) as raised:
        wait_until_available(monitor, "m", 1, timeout_s=TIMEOUT_S)

    assert str(raised.value) == (
        "servable m version 1 ended in END instead of reaching AVAILABLE; its last state: "
        "END with error DataLossError(DATA_LOSS: 'checksum mismatch')"
    )


def test_a_timeout_names_the_servable_and_its_last_state(
    manager: BasicManager, monitor: ServableStateMonitor
) -> None:
    """TimeoutError says what was waited for, how long, and the state it was stuck in."""
    gate = threading.Event()
    loader = FakeLoader(load_gate=gate)
    serve(manager, 1, loader)
    assert loader.load_started.wait(TIMEOUT_S)

    with pytest.raises(TimeoutError) as raised:
        wait_until_available(monitor, "m", 1, timeout_s=EXPIRING_S)
    gate.set()

    assert str(raised.value) == (
        f"servable m version 1 did not reach AVAILABLE within {EXPIRING_S} s; its last state: "
        "LOADING"
    )


def test_timeouts_for_unknown_servables_say_what_was_seen(
    manager: BasicManager, monitor: ServableStateMonitor
) -> None:
    """Never-published names and versions get messages pointing at the likely mistake."""
    serve(manager, 1, FakeLoader())
    wait_until_available(monitor, "m", 1, timeout_s=TIMEOUT_S)

    with pytest.raises(TimeoutError, match=r"no state of it was published \(versions seen: 1\)"):
        wait_until_available(monitor, "m", 9, timeout_s=EXPIRING_S)
    with pytest.raises(TimeoutError, match="no version of it was ever published"):
        wait_until_available(monitor, "other", timeout_s=EXPIRING_S)
    with pytest.raises(
        TimeoutError,
        match=r"\(any version\) did not reach UNLOADING .* "
        r"last states: version 1: AVAILABLE",
    ):
        wait_until_state(monitor, "m", ManagerState.UNLOADING, timeout_s=EXPIRING_S)


def test_wait_until_state_waits_for_end(
    manager: BasicManager, monitor: ServableStateMonitor
) -> None:
    """Waiting for END returns once the version is unloaded."""
    serve(manager, 1, FakeLoader())
    wait_until_available(monitor, "m", 1, timeout_s=TIMEOUT_S)
    manager.unload_servable(ServableId("m", 1))

    assert wait_until_state(monitor, "m", ManagerState.END, 1, TIMEOUT_S) == ServableId("m", 1)


MODEL_PY = """
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    @signature(
        inputs=[TensorSpec("x", "float32", [-1])], outputs=[TensorSpec("y", "float32", [-1])]
    )
    def serving_default(self, x):
        return {"y": x * 2}
"""


def test_takes_a_server_core(tmp_path: Path) -> None:
    """A ServerCore is waited on through its monitor."""
    base = make_version_dirs(tmp_path, "m", [1], {"model.py": MODEL_PY})
    options = ServerCoreOptions(
        platform_configs={"python": PythonPlatformConfig(allow_code_execution=True)},
        manager=ManagerOptions(load_retry=LoadRetryOptions(max_num_load_retries=0)),
    )
    with ServerCore(ModelServerConfig([ModelConfig.python("m", base)]), options) as core:
        assert wait_until_available(core, "m", timeout_s=TIMEOUT_S) == ServableId("m", 1)
        with core.servable_handle(ModelSpec.latest("m")) as handle:
            y = call_signature(handle.servable, None, {"x": np.array([2.0], np.float32)})
        assert y["y"].tolist() == [4.0]
