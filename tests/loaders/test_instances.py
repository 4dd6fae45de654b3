"""Model instances (instance_group count): N model processes, each call on a free one."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from servinglib import ModelConfig, ModelServerConfig, ModelSpec, ServerCore, ServerCoreOptions
from servinglib.errors import DeadlineExceededError, ServingError, UnavailableError
from servinglib.loaders.instances import InstancesServable
from servinglib.loaders.process import ProcessServable
from servinglib.loaders.python import PythonPlatformConfig
from servinglib.servable import Servable, SignatureSpec, Tensors, TensorSpec, deadline_scope
from servinglib.server.plane.data_plane import DataPlane
from servinglib.testing import wait_until, write_python_model

X = {"x": np.array([1.0], np.float32)}

MODEL_PY = """
import os, time
import numpy as np
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

X = [TensorSpec("x", "float32", [-1])]
PID = [TensorSpec("pid", "int64", [1])]

class Model(PythonModel):
    def load(self, path):
        self.dir = os.path.dirname(os.path.dirname(path))  # the test's directory

    def _until(self, done):
        deadline = time.monotonic() + 30
        while not done() and time.monotonic() < deadline:
            time.sleep(0.001)  # a condition another process makes true

    @signature(name="pid", inputs=X, outputs=PID)
    def pid(self, x):
        return {"pid": np.array([os.getpid()])}

    @signature(name="meet", inputs=X, outputs=PID)
    def meet(self, x):
        open(os.path.join(self.dir, f"met-{os.getpid()}"), "w").close()
        self._until(lambda: sum(n.startswith("met-") for n in os.listdir(self.dir)) >= 2)
        return {"pid": np.array([os.getpid()])}

    @signature(name="hold", inputs=X, outputs=PID)
    def hold(self, x):
        open(os.path.join(self.dir, f"held-{os.getpid()}"), "w").close()
        self._until(lambda: os.path.exists(os.path.join(self.dir, "go")))
        return {"pid": np.array([os.getpid()])}
"""


@pytest.fixture
def plane(tmp_path: Path) -> Iterator[tuple[DataPlane, Path]]:
    model = write_python_model(tmp_path, "model", MODEL_PY)
    config = ModelServerConfig((ModelConfig.python("model", str(model)),))
    platform = PythonPlatformConfig(allow_code_execution=True, instance_count=2)
    options = ServerCoreOptions(platform_configs={"python": platform})
    with ServerCore(config, options) as core:
        data_plane = DataPlane(core)
        try:
            yield data_plane, tmp_path  # where the model's calls leave their marks
        finally:
            (tmp_path / "go").touch()
            data_plane.close()


def _instances(data_plane: DataPlane) -> InstancesServable:
    with data_plane.core.servable_handle(ModelSpec.latest("model")) as handle:
        servable = handle.servable
    assert isinstance(servable, InstancesServable)
    return servable


def _pid(data_plane: DataPlane, signature: str, deadline: float | None = None) -> int:
    outputs = data_plane.infer_blocking(ModelSpec.latest("model"), signature, X, deadline=deadline)
    return int(outputs.outputs["pid"][0])


def _in_threads(count: int, call: object) -> list[object]:
    results: list[object] = [None] * count

    def run(index: int) -> None:
        try:
            results[index] = call()  # type: ignore[operator]
        except ServingError as error:
            results[index] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def test_two_instances_are_two_processes_that_run_calls_at_once(
    plane: tuple[DataPlane, Path],
) -> None:
    """Count 2 serves from two model processes, and two calls that need each other both end."""
    data_plane, _ = plane
    pids = {p.pid for p in _instances(data_plane).instances if isinstance(p, ProcessServable)}
    assert len(pids) == 2
    assert os.getpid() not in pids
    met = _in_threads(2, lambda: _pid(data_plane, "meet"))
    assert set(met) == pids  # each waited for the other in its own process: they overlapped


def test_a_call_waits_for_a_free_instance_within_its_deadline(
    plane: tuple[DataPlane, Path],
) -> None:
    """With both instances busy a third call waits, fails at its deadline, and runs once one is
    free."""
    data_plane, model = plane
    holders = [threading.Thread(target=_pid, args=(data_plane, "hold")) for _ in range(2)]
    for holder in holders:
        holder.start()
    wait_until(lambda: sum(n.name.startswith("held-") for n in model.iterdir()) == 2)
    started = time.monotonic()
    with pytest.raises(DeadlineExceededError):
        _pid(data_plane, "pid", deadline=started + 0.3)
    assert time.monotonic() - started < 5
    (model / "go").touch()
    for holder in holders:
        holder.join()
    assert _pid(data_plane, "pid") in {p.pid for p in _instances(data_plane).instances}  # type: ignore[attr-defined]


def test_an_event_loop_call_waits_for_a_free_instance_within_its_deadline(
    plane: tuple[DataPlane, Path],
) -> None:
    """An event loop's call (DataPlane.infer) takes a free instance too, and gives up at its
    deadline while both are busy."""
    data_plane, model = plane
    spec = ModelSpec.latest("model")

    async def calls() -> None:
        holds = [asyncio.ensure_future(data_plane.infer(spec, "hold", X)) for _ in range(2)]
        while sum(n.name.startswith("held-") for n in model.iterdir()) < 2:
            await asyncio.sleep(0.001)
        with pytest.raises(DeadlineExceededError):
            await data_plane.infer(spec, "pid", X, deadline=time.monotonic() + 0.3)
        (model / "go").touch()
        held = await asyncio.gather(*holds)
        assert len({int(h.outputs["pid"][0]) for h in held}) == 2  # one on each instance

    asyncio.run(calls())


def test_a_killed_instance_is_restarted_while_the_other_answers(
    plane: tuple[DataPlane, Path],
) -> None:
    """A killed instance process fails no later call: the other answers until it serves again."""
    data_plane, _ = plane
    first, second = _instances(data_plane).instances
    assert isinstance(first, ProcessServable)
    assert isinstance(second, ProcessServable)
    dead, other = first.pid, second.pid
    os.kill(dead, signal.SIGKILL)
    wait_until(lambda: not first.serving)
    answered = {_pid(data_plane, "pid") for _ in range(5)}
    # The restarted process may already serve some of these calls; the dead one answers none.
    assert dead not in answered
    assert answered <= {other, first.pid}
    wait_until(lambda: first.serving, timeout_s=60)
    assert first.pid != dead
    served = _in_threads(2, lambda: _pid(data_plane, "meet"))
    assert set(served) == {first.pid, other}


def test_statistics_count_the_calls_of_every_instance(plane: tuple[DataPlane, Path]) -> None:
    """The model's statistics count the calls whichever instance ran them."""
    data_plane, _ = plane
    _in_threads(2, lambda: _pid(data_plane, "meet"))
    _pid(data_plane, "pid")
    (stats,) = data_plane.questions.model_statistics("model")
    assert stats.inference_count == 3
    assert stats.success.count == 3


def test_a_dead_instance_fails_its_running_call_with_unavailable(
    plane: tuple[DataPlane, Path],
) -> None:
    """A call running on an instance that dies fails with UNAVAILABLE naming the process."""
    data_plane, model = plane
    results: list[object] = []
    holder = threading.Thread(
        target=lambda: results.extend(_in_threads(1, lambda: _pid(data_plane, "hold")))
    )
    holder.start()
    wait_until(lambda: any(n.name.startswith("held-") for n in model.iterdir()))
    (held,) = [n for n in model.iterdir() if n.name.startswith("held-")]
    os.kill(int(held.name.removeprefix("held-")), signal.SIGKILL)
    holder.join()
    (error,) = results
    assert isinstance(error, UnavailableError)
    assert held.name.removeprefix("held-") in error.message


class _Recording(Servable):
    """One in-process instance: records which call starts; ``hold`` calls wait for ``go``."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.go = threading.Event()

    @property
    def signatures(self) -> Mapping[str, SignatureSpec]:
        return {"serving_default": SignatureSpec([TensorSpec("x", "float32", [-1])], [])}

    def call(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> dict[str, npt.NDArray[Any]]:
        name = str(inputs["x"][0])
        self.started.append(name)
        if name == "0.0":
            self.go.wait(30)
        return {}


def test_waiting_calls_get_the_free_instance_first_come_first_served() -> None:
    """Calls waiting for the one busy instance run in the order they came."""
    instance = _Recording()
    servable = InstancesServable([instance])
    waiting = servable._free._waiting  # how many wait: orders the arrivals

    def call(x: float) -> threading.Thread:
        inputs = {"x": np.array([x], np.float32)}
        thread = threading.Thread(target=servable.call, args=("serving_default", inputs))
        thread.start()
        return thread

    threads = [call(0.0)]
    wait_until(lambda: instance.started == ["0.0"])
    for number, x in enumerate((1.0, 2.0, 3.0), start=1):
        threads.append(call(x))
        wait_until(lambda n=number: len(waiting) == n)  # type: ignore[misc]
    instance.go.set()
    for thread in threads:
        thread.join()
    assert instance.started == ["0.0", "1.0", "2.0", "3.0"]
    servable.close()


def test_a_waiting_call_past_its_deadline_leaves_the_queue_to_the_next() -> None:
    """A call that gave up waiting is skipped: the freed instance goes to the next waiter."""
    instance = _Recording()
    servable = InstancesServable([instance])
    waiting = servable._free._waiting

    def call(x: float, deadline: float | None = None) -> None:
        with contextlib.suppress(DeadlineExceededError), deadline_scope(deadline):
            servable.call("serving_default", {"x": np.array([x], np.float32)})

    holder = threading.Thread(target=call, args=(0.0,))
    holder.start()
    wait_until(lambda: instance.started == ["0.0"])
    gives_up = threading.Thread(target=call, args=(1.0, time.monotonic() + 0.2))
    gives_up.start()
    wait_until(lambda: len(waiting) == 1)
    later = threading.Thread(target=call, args=(2.0,))
    later.start()
    wait_until(lambda: len(waiting) == 2)
    gives_up.join(30)  # its deadline passed while the instance was busy
    assert len(waiting) == 1
    instance.go.set()
    holder.join(30)
    later.join(30)
    assert instance.started == ["0.0", "2.0"]
    servable.close()


def test_the_platform_options_set_the_instance_count() -> None:
    """PythonPlatformOptions.instance_count is PythonPlatformConfig.instance_count."""
    from servinglib.loaders.python import config_from_message
    from servinglib.protos import platform_options_pb2

    message = platform_options_pb2.PythonPlatformOptions(instance_count=3)
    assert config_from_message(message).instance_count == 3
    assert config_from_message(platform_options_pb2.PythonPlatformOptions()).instance_count == 0
    with pytest.raises(ValueError, match="instance_count"):
        PythonPlatformConfig(instance_count=-1)


def test_a_decoupled_triton_model_keeps_one_instance(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A decoupled model asking for two instances is served by one (in-process: it streams),
    saying so."""
    from servinglib.loaders.python import _instance_count

    model = tmp_path / "streamer"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(
        'backend: "python"\nmodel_transaction_policy { decoupled: true }\n'
        "instance_group [ { count: 2 kind: KIND_CPU } ]\n",
        encoding="utf-8",
    )
    config = PythonPlatformConfig(allow_code_execution=True)
    assert _instance_count(str(model / "1"), config) == 1
    assert "decoupled" in caplog.text
    (model / "config.pbtxt").write_text(
        'backend: "python"\ninstance_group [ { count: 2 kind: KIND_CPU } ]\n', encoding="utf-8"
    )
    assert _instance_count(str(model / "1"), config) == 2


def test_dynamic_batching_with_two_instances_batches_in_front_of_them(tmp_path: Path) -> None:
    """Two instances of a dynamically batched model are placed by one batching placement
    that runs a batch on each instance at once; one instance keeps its own placement."""
    from servinglib.loaders.python import _instances_batching, _triton_config
    from servinglib.loaders.triton.request_batching import RequestBatching

    model = tmp_path / "batched_twice"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(
        'backend: "python"\nmax_batch_size: 8\ndynamic_batching { }\n'
        "instance_group [ { count: 2 kind: KIND_CPU } ]\n",
        encoding="utf-8",
    )
    path = str(model / "1")
    batching = _instances_batching(path, 2, _triton_config(path))
    assert batching is not None
    placement = batching(InstancesServable([_Recording(), _Recording()]))
    try:
        assert isinstance(placement, RequestBatching)
        assert len(placement._threads) == 2
    finally:
        assert placement is not None
        placement.close()
    (model / "config.pbtxt").write_text('backend: "python"\nmax_batch_size: 8\n')
    unbatched = _instances_batching(path, 2, _triton_config(path))
    assert unbatched is None or unbatched(InstancesServable([_Recording()])) is None


WARMED_MODEL = """
import os
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    def load(self, path):
        self.dir = os.path.dirname(os.path.dirname(path))

    @signature(name="serving_default", inputs=[TensorSpec("x", "float32", [-1])],
               outputs=[TensorSpec("y", "float32", [-1])])
    def predict(self, x):
        with open(os.path.join(self.dir, f"warm-{os.getpid()}"), "a") as calls:
            calls.write("call\\n")
        return {"y": x}
"""


def test_every_instance_replays_the_warmup_records(tmp_path: Path) -> None:
    """Each instance's process replays the version's warmup records before the version serves."""
    from servinglib.codecs import from_numpy, write_records
    from servinglib.loaders.python import instances_loader
    from servinglib.loaders.warmup import WARMUP_FILE
    from servinglib.protos import prediction_log_pb2

    path = write_python_model(tmp_path, "m", WARMED_MODEL) / "1"
    log = prediction_log_pb2.PredictionLog()
    log.predict_log.request.inputs["x"].CopyFrom(from_numpy(np.array([1.0], np.float32)))
    (path / "assets.extra").mkdir()
    write_records(path / WARMUP_FILE, [log.SerializeToString()])
    loader = instances_loader(str(path), 2, PythonPlatformConfig(allow_code_execution=True))
    loader.load()
    try:
        servable = loader.servable()
        assert isinstance(servable, InstancesServable)
        pids = {i.pid for i in servable.instances if isinstance(i, ProcessServable)}
        warmed = {int(f.name.removeprefix("warm-")) for f in tmp_path.glob("warm-*")}
        assert warmed == pids
        assert all(f.read_text() == "call\n" for f in tmp_path.glob("warm-*"))
    finally:
        loader.unload()


MEETING_LOAD_MODEL = """
import os, time
import numpy as np
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    def load(self, path):
        where = os.path.dirname(os.path.dirname(path))
        open(os.path.join(where, f"loading-{os.getpid()}"), "w").close()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and sum(
            n.startswith("loading-") for n in os.listdir(where)
        ) < 2:
            time.sleep(0.001)  # a condition the other instance's load makes true
        self.met = sum(n.startswith("loading-") for n in os.listdir(where)) >= 2

    @signature(name="serving_default", inputs=[TensorSpec("x", "float32", [-1])],
               outputs=[TensorSpec("met", "int64", [1])])
    def predict(self, x):
        return {"met": np.array([int(self.met)])}
"""


def test_the_instances_load_at_once(tmp_path: Path) -> None:
    """Two instances' loads run at the same time (each waits for the other's to start)."""
    from servinglib.loaders.python import instances_loader
    from servinglib.servable import call_signature

    path = write_python_model(tmp_path, "m", MEETING_LOAD_MODEL) / "1"
    loader = instances_loader(str(path), 2, PythonPlatformConfig(allow_code_execution=True))
    loader.load()
    try:
        servable = loader.servable()
        assert isinstance(servable, InstancesServable)
        for instance in servable.instances:
            assert call_signature(instance, "serving_default", X)["met"][0] == 1
    finally:
        loader.unload()


def test_an_instance_that_fails_to_load_fails_the_load_and_closes_the_others(
    tmp_path: Path,
) -> None:
    """The load fails with the failing instance's error, and the instances loaded are closed."""
    from servinglib.errors import InvalidArgumentError
    from servinglib.loaders.instances import InstancesLoader

    closed: list[int] = []

    class Closing(_Recording):
        def __init__(self, index: int) -> None:
            super().__init__()
            self.index = index

        def close(self) -> None:
            closed.append(self.index)

    def start(path: str, index: int) -> Servable:
        if index == 1:
            raise InvalidArgumentError(f"instance {index} of {path} cannot load")
        return Closing(index)

    loader = InstancesLoader(str(tmp_path), 3, start)
    with pytest.raises(InvalidArgumentError, match="instance 1 of"):
        loader.load()
    assert sorted(closed) == [0, 2]
