"""SavedModelLoader: load errors and retries, resource estimate, unload releasing the model."""

from __future__ import annotations

import gc
import logging
import os
import shutil
import subprocess
import sys
import textwrap
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tensorflow as tf
from saved_model_builders import load

from servinglib.core.basic_manager import BasicManager, ManagerOptions
from servinglib.core.loader import Loader
from servinglib.core.loader_harness import LoadRetryOptions
from servinglib.core.resources import ResourceAllocation
from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId
from servinglib.core.servable_request import ServableRequest
from servinglib.errors import DataLossError, InvalidArgumentError, NotFoundError, ServingError
from servinglib.loaders.tensorflow import SavedModelLoader, TensorFlowPlatformConfig
from servinglib.servable import call_signature
from servinglib.testing import FakeClock, wait_until

TIMEOUT_S = 10.0
V1 = ServableId("m", 1)
RETRIES = 3
RETRY_INTERVAL_S = 30.0


class CountingLoader(Loader):
    """Delegates to a SavedModelLoader and counts load attempts."""

    def __init__(self, inner: SavedModelLoader) -> None:
        self.inner = inner
        self.load_calls = 0

    def estimate_resources(self) -> ResourceAllocation:
        return self.inner.estimate_resources()

    def load(self) -> None:
        self.load_calls += 1
        self.inner.load()

    def unload(self) -> None:
        self.inner.unload()

    def servable(self) -> Any:
        return self.inner.servable()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def manager(clock: FakeClock) -> Iterator[BasicManager]:
    """A BasicManager retrying failed loads up to 3 times, 30 s apart on a fake clock."""
    options = ManagerOptions(
        load_retry=LoadRetryOptions(
            max_num_load_retries=RETRIES, load_retry_interval_s=RETRY_INTERVAL_S
        )
    )
    with BasicManager(options, clock=clock) as basic_manager:
        yield basic_manager


@pytest.fixture
def model_copy(examples_model: Path, tmp_path: Path) -> Path:
    """A private copy of the examples model, free to damage."""
    return Path(shutil.copytree(examples_model, tmp_path / "1"))


def corrupt_pb(path: Path) -> None:
    (path / "saved_model.pb").write_bytes(b"\x0a\xff\xff\xff not a proto" * 8)


def truncate_pb(path: Path) -> None:
    pb = path / "saved_model.pb"
    pb.write_bytes(pb.read_bytes()[: pb.stat().st_size // 2])


def remove_pb(path: Path) -> None:
    (path / "saved_model.pb").unlink()


def remove_variables(path: Path) -> None:
    shutil.rmtree(path / "variables")


def remove_variables_data(path: Path) -> None:
    for shard in (path / "variables").glob("variables.data-*"):
        shard.unlink()


def truncate_variables_data(path: Path) -> None:
    for shard in (path / "variables").glob("variables.data-*"):
        shard.write_bytes(shard.read_bytes()[:3])


@pytest.mark.parametrize(
    ("damage", "error", "message"),
    [
        (corrupt_pb, DataLossError, r"saved_model.pb is corrupt"),
        (truncate_pb, DataLossError, r"saved_model.pb is corrupt"),
        (truncate_variables_data, DataLossError, r"Loading the SavedModel in .* failed"),
    ],
)
def test_damaged_model_fails_once_with_a_clear_error(
    model_copy: Path,
    manager: BasicManager,
    clock: FakeClock,
    *,
    damage: Callable[[Path], None],
    error: type[ServingError],
    message: str,
) -> None:
    """Damaged model files fail the load at once (DATA_LOSS naming the path), despite retries."""
    damage(model_copy)
    loader = CountingLoader(SavedModelLoader(str(model_copy)))
    manager.manage_servable(ServableData.of(V1, loader))
    with pytest.raises(error, match=message) as caught:
        manager.load_servable(V1).result(TIMEOUT_S)
    assert str(model_copy) in caught.value.message
    assert loader.load_calls == 1
    assert clock.pending_timers == 0
    assert manager.harness_error(V1) == caught.value


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (remove_pb, r"has no saved_model.pb"),
        (remove_variables, r"variables.index is missing"),
        (remove_variables_data, r"variables.data-00000-of-00001"),
    ],
)
def test_missing_model_files_are_not_found_and_retried(
    model_copy: Path,
    manager: BasicManager,
    clock: FakeClock,
    *,
    damage: Callable[[Path], None],
    message: str,
) -> None:
    """Missing model files (maybe still being copied in) are NOT_FOUND and retried."""
    damage(model_copy)
    loader = CountingLoader(SavedModelLoader(str(model_copy)))
    manager.manage_servable(ServableData.of(V1, loader))
    future = manager.load_servable(V1)
    for attempt in range(1, RETRIES + 1):
        wait_until(lambda: clock.pending_timers == 1)
        assert loader.load_calls == attempt
        clock.advance(RETRY_INTERVAL_S)
    with pytest.raises(NotFoundError, match=message) as caught:
        future.result(TIMEOUT_S)
    assert str(model_copy) in caught.value.message
    assert loader.load_calls == RETRIES + 1


def test_wrong_tags_fail_once_naming_the_tags_available(
    examples_model: Path, manager: BasicManager, clock: FakeClock
) -> None:
    """Tags no MetaGraph has: INVALID_ARGUMENT listing the tag sets there are, not retried."""
    config = TensorFlowPlatformConfig(saved_model_tags=("serve", "gpu"))
    loader = CountingLoader(SavedModelLoader(str(examples_model), config))
    manager.manage_servable(ServableData.of(V1, loader))
    with pytest.raises(InvalidArgumentError, match=r"no MetaGraph with tags \{gpu, serve\}") as e:
        manager.load_servable(V1).result(TIMEOUT_S)
    assert "its tag sets are: {serve}" in e.value.message
    assert loader.load_calls == 1
    assert clock.pending_timers == 0


def test_error_that_may_heal_is_retried_then_serves(
    examples_model: Path,
    manager: BasicManager,
    clock: FakeClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A load failing with an error that is not about the model (an OSError) is retried."""
    real_load = tf.saved_model.load
    failures = [OSError("storage briefly unavailable")]

    def flaky_load(*args: Any, **kwargs: Any) -> Any:
        if failures:
            raise failures.pop()
        return real_load(*args, **kwargs)

    monkeypatch.setattr(tf.saved_model, "load", flaky_load)
    loader = CountingLoader(SavedModelLoader(str(examples_model)))
    manager.manage_servable(ServableData.of(V1, loader))
    future = manager.load_servable(V1)
    wait_until(lambda: clock.pending_timers == 1, TIMEOUT_S)
    clock.advance(RETRY_INTERVAL_S)
    future.result(TIMEOUT_S)
    assert loader.load_calls == 2
    with manager.servable_handle(ServableRequest.latest("m")) as handle:
        out = call_signature(handle.servable, None, {"x": np.array([2.0], np.float32)})
    assert out["y"].tolist() == [3.0]


def test_resource_estimate_is_directory_size_times_1_2(examples_model: Path) -> None:
    """The RAM estimate is the version directory's total file size x 1.2 (TF Serving's rule)."""
    size = sum(f.stat().st_size for f in examples_model.rglob("*") if f.is_file())
    loader = SavedModelLoader(str(examples_model))
    assert loader.estimate_resources() == ResourceAllocation.ram_bytes(int(size * 1.2))
    loader.load()
    assert loader.estimate_resources() == ResourceAllocation.ram_bytes(int(size * 1.2))
    loader.unload()


def test_unloaded_model_is_garbage_collected(examples_model: Path) -> None:
    """After unload nothing keeps the loaded TF object alive, though the servable is still held."""
    loader, servable = load(examples_model)
    model = weakref.ref(servable.model)
    function = weakref.ref(servable.model.signatures["serving_default"])
    loader.unload()
    gc.collect()
    assert model() is None
    assert function() is None


def rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_memory_stays_bounded_over_50_load_unload_cycles(examples_model: Path) -> None:
    """Fifty load/call/unload cycles grow the process by far less than 50 MB."""
    x = {"x": np.array([1.0], np.float32)}

    def cycle() -> None:
        loader, servable = load(examples_model)
        call_signature(servable, None, x)
        loader.unload()

    for _ in range(5):  # warm TF's caches and the allocator
        cycle()
    before = rss_bytes()
    for _ in range(50):
        cycle()
    growth_mb = (rss_bytes() - before) / 2**20
    print(f"RSS growth over 50 load/unload cycles: {growth_mb:.1f} MB")
    assert growth_mb < 50


def test_thread_settings_that_cannot_apply_log_a_warning(
    examples_model: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Once TF has run, other pool sizes cannot apply: the load works and a warning says so."""
    current = tf.config.threading.get_intra_op_parallelism_threads()
    config = TensorFlowPlatformConfig(intra_op_parallelism_threads=current + 3)
    with caplog.at_level(logging.WARNING, "servinglib.loaders.tensorflow"):
        load(examples_model, config)
    assert f"stays {current}" in caplog.text
    assert f"not {current + 3} as configured" in caplog.text


THREADS_PROBE = textwrap.dedent(
    """
    import sys
    from servinglib.loaders.tensorflow import SavedModelLoader, TensorFlowPlatformConfig
    config = TensorFlowPlatformConfig(
        intra_op_parallelism_threads=3, inter_op_parallelism_threads=2
    )
    SavedModelLoader(sys.argv[1], config).load()
    import tensorflow as tf
    print(
        tf.config.threading.get_intra_op_parallelism_threads(),
        tf.config.threading.get_inter_op_parallelism_threads(),
    )
    """
)


def test_thread_settings_apply_before_tf_first_runs(examples_model: Path) -> None:
    """In a fresh process the configured intra/inter-op pool sizes are what TF uses."""
    done = subprocess.run(
        [sys.executable, "-c", THREADS_PROBE, str(examples_model)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["3", "2"]
