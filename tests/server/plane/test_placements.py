"""The placement seam and the observers: a servable places its own calls; each call is recorded."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import attrs
import numpy as np
import numpy.typing as npt
import pytest

from servinglib.core.simple_loader import SimpleLoader
from servinglib.errors import DeadlineExceededError, InvalidArgumentError, UnavailableError
from servinglib.loaders.registry import register_platform
from servinglib.servable import (
    ModelCall,
    Placement,
    Servable,
    SignatureSpec,
    Tensors,
    TensorSpec,
    deadline_exceeded,
)
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.model_spec import ModelSpec
from servinglib.server.observe.call_record import CallRecord
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.server_core import ServerCore
from servinglib.server.server_core_options import ServerCoreOptions
from servinglib.testing import FakeStoragePathSourceAdapter, make_version_dirs
from servinglib.testing.plugin import TEST_SERVER_CORE_OPTIONS

_Outputs = dict[str, npt.NDArray[Any]]
PLATFORM = "placement_test"
SPEC = ModelSpec.latest("m")
X = {"x": np.array([1.0], np.float32)}


class Recording(Placement):
    """Runs calls where asked and says which of its methods ran them, and how often."""

    def __init__(self) -> None:
        self.runs: list[str] = []
        self.released = 0

    async def run(self, call: ModelCall) -> _Outputs:
        self.runs.append("run")
        return self._run(call)

    def run_blocking(self, call: ModelCall) -> _Outputs:
        self.runs.append("run_blocking")
        return self._run(call)

    def _run(self, call: ModelCall) -> _Outputs:
        try:
            if call.deadline is not None:
                raise deadline_exceeded()
            return call.run()
        finally:
            call.release()
            self.released += 1


class Placed(Servable):
    """One signature placed by ``placement``, one left to the plane."""

    def __init__(self, placement: Placement) -> None:
        self._placement = placement
        spec = SignatureSpec([TensorSpec("x", "float32", [-1])], [TensorSpec("y", "float32", [-1])])
        self._signatures = {"serving_default": spec, "plain": spec}

    @property
    def signatures(self) -> Mapping[str, SignatureSpec]:
        return self._signatures

    def call(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> _Outputs:
        if float(inputs["x"][0]) < 0:
            raise InvalidArgumentError("x must not be negative")
        return {"y": inputs["x"] * 2}

    def placement(self, signature_name: str) -> Placement | None:
        return self._placement if signature_name == "serving_default" else None


@pytest.fixture
def placement() -> Recording:
    return Recording()


def serve(root: Path, placement: Placement, options: ServerCoreOptions) -> ServerCore:
    """A core serving model m, version 1: a :class:`Placed` servable placed by ``placement``."""
    register_platform(
        PLATFORM,
        lambda _config: FakeStoragePathSourceAdapter(
            lambda _path: SimpleLoader(lambda: Placed(placement))
        ),
        replace=True,
    )
    make_version_dirs(root, "m", [1], {"servable": b""})
    return ServerCore(ModelServerConfig([ModelConfig("m", str(root / "m"), PLATFORM)]), options)


@pytest.fixture
def core(tmp_path: Path, placement: Recording) -> Iterator[ServerCore]:
    with serve(tmp_path, placement, TEST_SERVER_CORE_OPTIONS) as core:
        yield core


class Records:
    """An observer keeping every record (a CallObserver)."""

    def __init__(self) -> None:
        self.records: list[CallRecord] = []

    def call_finished(self, record: CallRecord) -> None:
        self.records.append(record)


class Raising:
    """An observer that always fails."""

    def call_finished(self, record: CallRecord) -> None:
        raise RuntimeError("observer broke")


def test_a_servable_places_its_own_calls_for_loops_and_threads(
    core: ServerCore, placement: Recording
) -> None:
    """The plane runs a signature where the servable's placement says, with both methods."""
    plane = DataPlane(core)
    try:
        answer = asyncio.run(plane.infer(SPEC, None, X))
        blocking = plane.infer_blocking(SPEC, None, X)
        plain = plane.infer_blocking(SPEC, "plain", X)
    finally:
        plane.close()
    assert answer.outputs["y"].tolist() == blocking.outputs["y"].tolist() == [2.0]
    assert plain.outputs["y"].tolist() == [2.0]
    assert placement.runs == ["run", "run_blocking"]  # "plain" took the plane's pool
    assert placement.released == 2


def test_observers_get_one_record_per_call_and_cannot_change_the_answer(
    core: ServerCore, placement: Recording
) -> None:
    """Answers, model errors and deadlines leave a CallRecord each; observer errors are dropped."""
    records = Records()
    plane = DataPlane(core, observers=[Raising(), records])
    try:
        plane.infer_blocking(SPEC, None, X, output_filter=["y"])
        with pytest.raises(InvalidArgumentError):
            plane.infer_blocking(SPEC, None, {"x": np.array([-1.0], np.float32)})
        with pytest.raises(DeadlineExceededError):
            asyncio.run(plane.infer(SPEC, None, X, deadline=1e12))
    finally:
        plane.close()
    ok, bad, late = records.records
    assert (ok.model_name, ok.version, ok.signature_name) == ("m", 1, "serving_default")
    assert ok.error is None
    assert ok.outputs is not None
    assert ok.outputs["y"].tolist() == [2.0]
    assert ok.output_filter == ("y",)
    assert ok.started_ns <= ok.stages.infer_started_ns <= ok.stages.infer_ended_ns <= ok.ended_ns
    assert isinstance(bad.error, InvalidArgumentError)
    assert bad.outputs is None
    assert isinstance(late.error, DeadlineExceededError)
    assert plane.questions.model_statistics("m")[0].fail.count == 2


def test_the_in_flight_bound_is_the_planes(tmp_path: Path) -> None:
    """Past max_requests_in_flight_per_model a request is refused at once, and counted nowhere."""
    entered = threading.Event()
    go = threading.Event()

    class Holding(Placement):
        async def run(self, call: ModelCall) -> _Outputs:
            raise AssertionError("only server threads call here")

        def run_blocking(self, call: ModelCall) -> _Outputs:
            entered.set()
            go.wait(30)
            try:
                return call.run()
            finally:
                call.release()

    options = attrs.evolve(TEST_SERVER_CORE_OPTIONS, max_requests_in_flight_per_model=1)
    with serve(tmp_path, Holding(), options) as core:
        plane = DataPlane(core)
        try:
            held = threading.Thread(target=plane.infer_blocking, args=(SPEC, None, X))
            held.start()
            assert entered.wait(30)
            assert plane.requests_in_flight() == {"m": 1}
            with pytest.raises(UnavailableError, match="limit of 1 requests in flight"):
                plane.infer_blocking(SPEC, None, X)
            go.set()
            held.join(30)
            assert plane.requests_in_flight() == {}
            assert plane.infer_blocking(SPEC, None, X).outputs["y"].tolist() == [2.0]
        finally:
            go.set()
            plane.close()
