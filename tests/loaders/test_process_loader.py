"""Model processes: a version loaded at idle priority in a process of its own, served from it."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from servinglib import ModelConfig, ModelServerConfig, ModelSpec, ServerCore, ServerCoreOptions
from servinglib.errors import (
    DataLossError,
    DeadlineExceededError,
    FailedPreconditionError,
    InvalidArgumentError,
    UnavailableError,
    UnimplementedError,
)
from servinglib.examples import HALF_PLUS_TWO
from servinglib.loaders.process import ProcessLoader, ProcessServable
from servinglib.loaders.python import PythonLoader, PythonPlatformConfig
from servinglib.loaders.tensorflow import SavedModelLoader, TensorFlowPlatformConfig
from servinglib.loaders.warmup import WarmupOptions
from servinglib.request_extras import RequestExtras, request_extras_scope
from servinglib.servable import ExecutionMode, call_signature, deadline_scope
from servinglib.testing import wait_until, write_python_model

TF_FACTORY = "servinglib.loaders.tensorflow.saved_model_loader:SavedModelLoader"
PY_FACTORY = "servinglib.loaders.python:PythonLoader"
PY_CONFIG = PythonPlatformConfig(allow_code_execution=True, warmup=WarmupOptions(enabled=False))
X = {"x": np.array([1.0, 2.0, 5.0], np.float32)}

MODEL_PY = """
import asyncio, logging, os, threading, time
import numpy as np
from servinglib.errors import InvalidArgumentError
from servinglib.loaders import PythonModel, signature
from servinglib.servable import ExecutionMode, TensorSpec

X = [TensorSpec("x", "float32", [-1])]
POLICY = [TensorSpec("load", "int64", [1]), TensorSpec("call", "int64", [1])]

class Model(PythonModel):
    MEET = threading.Barrier(4, timeout=30)

    def load(self, path):
        self.calls = os.path.dirname(os.path.dirname(path))  # the test's directory
        self.load_policy = os.sched_getscheduler(0)
        logging.getLogger("test.model").warning("loading %s", path)

    @signature(name="serving_default", inputs=X, outputs=[TensorSpec("y", "float32", [-1])])
    def predict(self, x):
        if (x < 0).any():
            raise InvalidArgumentError("x must not be negative")
        return {"y": x * 2}

    @signature(name="policy", inputs=X, outputs=POLICY, execution_mode=ExecutionMode.INLINE)
    def policy(self, x):
        return {"load": np.array([self.load_policy]), "call": np.array([os.sched_getscheduler(0)])}

    @signature(name="sleep", inputs=X, outputs=[TensorSpec("pid", "int64", [1])])
    def sleep(self, x):
        open(os.path.join(self.calls, "sleeping"), "w").close()  # the test sees it running
        time.sleep(float(x[0]))
        return {"pid": np.array([os.getpid()])}

    @signature(name="meet", inputs=X, outputs=[TensorSpec("pid", "int64", [1])])
    def meet(self, x):
        self.MEET.wait()  # returns once 4 calls run at once; breaks after 30 s otherwise
        return {"pid": np.array([os.getpid()])}

    @signature(name="meet_and_log", inputs=X, outputs=[TensorSpec("pid", "int64", [1])])
    def meet_and_log(self, x):
        self.MEET.wait()
        time.sleep(float(x[0]) * 0.2)  # then each logs and answers in turn, 0.2 s apart
        logging.getLogger("test.model").warning("met %d", int(x[0]))
        return {"pid": np.array([os.getpid()])}

    @signature(name="context", inputs=X,
               outputs=[TensorSpec("left_ms", "int64", [1]), TensorSpec("n", "int64", [1])])
    def context(self, x):
        from servinglib.request_extras import request_extras
        from servinglib.servable import request_deadline
        deadline = request_deadline()
        left = -1 if deadline is None else int((deadline - time.monotonic()) * 1000)
        n = request_extras().parameters.get("n", -1)
        return {"left_ms": np.array([left]), "n": np.array([n])}

    @signature(name="reader", inputs=X, outputs=[TensorSpec("main", "int64", [1])])
    def reader(self, x):
        logging.getLogger("test.model").warning("reading")
        return {"main": np.array([threading.current_thread() is threading.main_thread()])}

    @signature(name="inplace", inputs=X, outputs=[TensorSpec("y", "float32", [-1])])
    def inplace(self, x):
        x += 1  # the input the process received is writable
        return {"y": x}

    @signature(name="log_later", inputs=X, outputs=[TensorSpec("y", "float32", [-1])])
    def log_later(self, x):
        def log_once_told():
            while not os.path.exists(os.path.join(self.calls, "log-now")):
                time.sleep(0.01)
            logging.getLogger("test.model").warning("idle")
        threading.Thread(target=log_once_told, daemon=True).start()
        return {"y": x}

    @signature(name="later", inputs=X, outputs=[TensorSpec("y", "float32", [-1])],
               execution_mode=ExecutionMode.ASYNC)
    async def later(self, x):
        await asyncio.sleep(0.01)
        return {"y": x + 1}
"""


@pytest.fixture
def python_model(tmp_path: Path) -> Path:
    return write_python_model(tmp_path, "model", MODEL_PY) / "1"


@pytest.fixture
def served(python_model: Path) -> Iterator[tuple[ProcessLoader, ProcessServable]]:
    loader = ProcessLoader(str(python_model), PY_FACTORY, PY_CONFIG)
    loader.load()
    servable = loader.servable()
    assert isinstance(servable, ProcessServable)
    yield loader, servable
    loader.unload()


def test_a_savedmodel_answers_from_its_process_as_it_would_in_this_one() -> None:
    path = os.path.join(HALF_PLUS_TWO, "1")
    here = SavedModelLoader(path)
    there = ProcessLoader(path, TF_FACTORY, TensorFlowPlatformConfig())
    here.load()
    there.load()
    try:
        servable = there.servable()
        assert isinstance(servable, ProcessServable)
        assert servable.pid != os.getpid()
        ours = here.servable().signatures
        assert servable.signatures.keys() == ours.keys()
        for name, spec in servable.signatures.items():
            assert spec.inputs == ours[name].inputs
            assert spec.outputs == ours[name].outputs
            assert spec.method_name == ours[name].method_name
            assert spec.execution_mode is ExecutionMode.THREAD
        expected = call_signature(here.servable(), "serving_default", X)
        got = call_signature(servable, "serving_default", X)
        assert got.keys() == expected.keys()
        np.testing.assert_array_equal(got["y"], expected["y"])
    finally:
        here.unload()
        there.unload()


def test_a_broken_savedmodel_fails_its_load_with_the_same_error(tmp_path: Path) -> None:
    version = tmp_path / "1"
    shutil.copytree(os.path.join(HALF_PLUS_TWO, "1"), version)
    (version / "saved_model.pb").write_bytes(b"\x0a\xff\xff not a graph")
    loader = ProcessLoader(str(version), TF_FACTORY, TensorFlowPlatformConfig())
    with pytest.raises(DataLossError, match=r"saved_model.pb is corrupt"):
        loader.load()
    with pytest.raises(FailedPreconditionError):
        loader.servable()


def test_the_processs_log_records_are_logged_by_the_server(
    python_model: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    loader = ProcessLoader(str(python_model), PY_FACTORY, PY_CONFIG)
    loader.load()
    try:
        servable = loader.servable()
        assert isinstance(servable, ProcessServable)
        (record,) = [r for r in caplog.records if r.name == "test.model"]
        assert record.levelno == logging.WARNING
        assert record.getMessage() == f"model process {servable.pid}: loading {python_model}"
        assert record.model_process == servable.pid  # (JSON logs carry it as a field)
    finally:
        loader.unload()


def test_the_load_runs_at_idle_priority_and_calls_at_normal_priority(
    served: tuple[ProcessLoader, ProcessServable],
) -> None:
    _, servable = served
    got = call_signature(servable, "policy", X)
    assert got["load"][0] == os.SCHED_IDLE
    assert got["call"][0] == os.SCHED_OTHER


def test_errors_keep_their_code_and_message_and_async_signatures_run(
    served: tuple[ProcessLoader, ProcessServable],
) -> None:
    _, servable = served
    np.testing.assert_array_equal(call_signature(servable, "serving_default", X)["y"], X["x"] * 2)
    np.testing.assert_array_equal(call_signature(servable, "later", X)["y"], X["x"] + 1)
    with pytest.raises(InvalidArgumentError, match=r"x must not be negative"):
        call_signature(servable, "serving_default", {"x": np.array([-1.0], np.float32)})


def test_calls_run_concurrently_in_the_process(
    served: tuple[ProcessLoader, ProcessServable],
) -> None:
    _, servable = served
    pids: list[int] = []

    def meet() -> None:
        pids.append(int(call_signature(servable, "meet", X)["pid"][0]))

    threads = [threading.Thread(target=meet) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert pids == [servable.pid] * 4  # all four met in the process: they ran at once


def test_calls_in_flight_on_threads_read_the_answers_themselves(
    served: tuple[ProcessLoader, ProcessServable],
) -> None:
    """While calls wait on threads, one of them reads what the process sends and, its own
    answer in, hands the reading to the next: the process's reader thread reads nothing
    (the first call's answer comes first; the others' log lines and answers after it)."""
    _, servable = served
    readers: list[str] = []  # the threads here that read each log line the calls sent

    class Readers(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if " met " in record.getMessage():
                readers.append(threading.current_thread().name)

    handler = Readers()
    logger = logging.getLogger("test.model")
    logger.addHandler(handler)
    callers = [
        threading.Thread(
            target=call_signature,
            args=(servable, "meet_and_log", {"x": np.array([i], np.float32)}),
            name=f"caller-{i}",
        )
        for i in range(4)
    ]
    try:
        callers[0].start()  # alone in flight: it reads; its answer comes first
        wait_until(lambda: len(servable._pending) == 1)  # the call is in flight
        for caller in callers[1:]:
            caller.start()
        for caller in callers:
            caller.join(60)
    finally:
        logger.removeHandler(handler)
    assert len(readers) == 4  # all four ran at once (the barrier) and logged
    assert set(readers) <= {caller.name for caller in callers}, readers


def test_a_lone_call_runs_on_the_thread_that_read_it_and_reads_its_own_answer(
    served: tuple[ProcessLoader, ProcessServable], caplog: pytest.LogCaptureFixture
) -> None:
    """The only call in flight runs on the process's reading thread and its caller's thread
    reads the answer (and the log lines before it): no thread hands either over."""
    _, servable = served
    caplog.set_level(logging.INFO)
    answer = call_signature(servable, "reader", X)
    assert int(answer["main"][0]) == 1  # the process's main thread read the call and ran it
    (record,) = [r for r in caplog.records if r.getMessage().endswith(": reading")]
    assert record.threadName == threading.current_thread().name


def test_a_call_made_while_a_lone_call_reads_its_answer_is_answered_at_once(
    served: tuple[ProcessLoader, ProcessServable], tmp_path: Path
) -> None:
    """A second call runs beside a long one whose caller reads, and returns while it runs."""
    _, servable = served
    long_call = threading.Thread(
        target=call_signature, args=(servable, "sleep", {"x": np.array([2.0], np.float32)})
    )
    long_call.start()
    wait_until((tmp_path / "sleeping").exists)  # the long call runs; its caller reads
    np.testing.assert_array_equal(call_signature(servable, "serving_default", X)["y"], X["x"] * 2)
    assert long_call.is_alive()  # answered while the long call still ran
    long_call.join(30)


def test_log_lines_of_an_idle_process_are_logged(
    served: tuple[ProcessLoader, ProcessServable],
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
) -> None:
    """A log line the process sends with no call in flight is read and logged all the same."""
    _, servable = served
    caplog.set_level(logging.INFO)
    call_signature(servable, "log_later", X)  # a lone call: it read its own answer
    (tmp_path / "log-now").touch()  # the model's thread logs now, with no call in flight
    wait_until(lambda: any(r.getMessage().endswith(": idle") for r in caplog.records))


@pytest.mark.parametrize("floats", [3, 1 << 20])
def test_tensors_cross_to_the_process_and_back_intact_and_writable(
    served: tuple[ProcessLoader, ProcessServable], floats: int
) -> None:
    """Small tensors travel in the pickle, large ones (4 MiB) beside it; both arrive whole
    and writable."""
    _, servable = served
    x = np.random.default_rng(0).random(floats, np.float32)
    sent = x.copy()
    answer = call_signature(servable, "inplace", {"x": x})
    np.testing.assert_array_equal(answer["y"], sent + 1)
    np.testing.assert_array_equal(x, sent)  # the caller's own array is left alone
    assert answer["y"].flags.writeable


def test_a_call_past_its_deadline_gives_up(served: tuple[ProcessLoader, ProcessServable]) -> None:
    _, servable = served
    started = time.monotonic()
    with deadline_scope(started + 0.2), pytest.raises(DeadlineExceededError):
        call_signature(servable, "sleep", {"x": np.array([2.0], np.float32)})
    assert time.monotonic() - started < 1.0
    assert call_signature(servable, "serving_default", X)["y"].shape == (3,)  # still serving


def test_a_call_carries_its_deadline_and_extras_into_the_process(
    served: tuple[ProcessLoader, ProcessServable],
) -> None:
    """The model in the process reads the request's parameters and its remaining deadline."""
    _, servable = served
    extras = RequestExtras("req-1", parameters={"n": 7})
    with deadline_scope(time.monotonic() + 30), request_extras_scope(extras):
        answer = call_signature(servable, "context", X)
    assert int(answer["n"][0]) == 7
    assert 0 < int(answer["left_ms"][0]) <= 30_000
    answer = call_signature(servable, "context", X)
    assert (int(answer["left_ms"][0]), int(answer["n"][0])) == (-1, -1)  # none: none


def test_a_process_that_dies_fails_its_calls_and_is_started_again(
    served: tuple[ProcessLoader, ProcessServable], tmp_path: Path
) -> None:
    _, servable = served
    errors: list[BaseException] = []

    def sleep() -> None:
        try:
            call_signature(servable, "sleep", {"x": np.array([30.0], np.float32)})
        except UnavailableError as error:
            errors.append(error)

    waiting = threading.Thread(target=sleep)
    waiting.start()
    wait_until((tmp_path / "sleeping").exists)  # the call runs in the process
    killed = servable.pid
    os.kill(killed, signal.SIGKILL)
    waiting.join(10)
    assert not waiting.is_alive()
    assert len(errors) == 1
    assert f"model process {killed}" in str(errors[0])
    assert "exited with status -9; a new one is loading the version" in str(errors[0])

    def answers() -> bool:
        try:
            call_signature(servable, "serving_default", X)
        except UnavailableError:
            return False
        return True

    wait_until(answers, timeout_s=60)
    assert servable.pid != killed
    np.testing.assert_array_equal(call_signature(servable, "serving_default", X)["y"], X["x"] * 2)


def test_unload_during_a_restart_stops_it(python_model: Path) -> None:
    loader = ProcessLoader(str(python_model), PY_FACTORY, PY_CONFIG)
    loader.load()
    servable = loader.servable()
    assert isinstance(servable, ProcessServable)
    os.kill(servable.pid, signal.SIGKILL)
    loader.unload()  # whatever the restart had got to
    with pytest.raises(FailedPreconditionError, match=r"has been unloaded"):
        servable.call("serving_default", X)
    time.sleep(0.5)  # a negative check needs a window: a restart would be back by now
    with pytest.raises(FailedPreconditionError, match=r"has been unloaded"):
        servable.call("serving_default", X)  # no restart came back after the unload


def test_unload_ends_the_process(python_model: Path) -> None:
    loader = ProcessLoader(str(python_model), PY_FACTORY, PY_CONFIG)
    loader.load()
    servable = loader.servable()
    assert isinstance(servable, ProcessServable)
    pid = servable.pid
    loader.unload()
    assert not os.path.exists(f"/proc/{pid}")  # exited and reaped
    with pytest.raises(FailedPreconditionError, match=r"has been unloaded"):
        servable.call("serving_default", X)


def test_a_streaming_signature_fails_the_load(tmp_path: Path) -> None:
    source = """
        from servinglib.loaders import PythonModel, signature
        from servinglib.servable import TensorSpec

        class Model(PythonModel):
            @signature(name="tokens", inputs=[TensorSpec("x", "float32", [-1])],
                       outputs=[TensorSpec("y", "float32", [-1])])
            def tokens(self, x):
                yield {"y": x}
    """
    version = write_python_model(tmp_path, "m", source) / "1"
    with pytest.raises(UnimplementedError, match=r"Streaming signatures cannot run in a model"):
        ProcessLoader(str(version), PY_FACTORY, PY_CONFIG).load()


def test_a_server_core_serves_python_models_from_model_processes(python_model: Path) -> None:
    config = ModelServerConfig((ModelConfig.python("model", str(python_model.parent)),))
    platform = PythonPlatformConfig(allow_code_execution=True, model_process=True)
    options = ServerCoreOptions(platform_configs={"python": platform})
    with ServerCore(config, options) as core, core.servable_handle(ModelSpec.latest("model")) as h:
        servable = h.servable
        assert isinstance(servable, ProcessServable)
        np.testing.assert_array_equal(
            call_signature(servable, "serving_default", X)["y"], X["x"] * 2
        )
        pid = servable.pid
    assert not os.path.exists(f"/proc/{pid}")


def test_the_platform_options_turn_model_processes_on() -> None:
    from servinglib.loaders.python import config_from_message as python_config
    from servinglib.loaders.tensorflow.config import config_from_message as tensorflow_config
    from servinglib.protos import platform_options_pb2

    message = platform_options_pb2.TensorFlowPlatformOptions(model_process=True)
    assert tensorflow_config(message).model_process
    assert not tensorflow_config(platform_options_pb2.TensorFlowPlatformOptions()).model_process
    python = platform_options_pb2.PythonPlatformOptions(
        allow_code_execution=True, model_process=True
    )
    assert python_config(python).model_process
    assert PythonLoader  # (the factory the platform names: servinglib.loaders.python:PythonLoader)
