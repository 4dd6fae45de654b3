"""Warmup: recorded requests replayed at load, before a version becomes available."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from servinglib.codecs import from_numpy, make_example, write_records
from servinglib.core.basic_manager import BasicManager, ManagerOptions
from servinglib.core.event_bus import EventBus
from servinglib.core.loader_harness import LoadRetryOptions
from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId
from servinglib.core.servable_state import ManagerState, ServableState
from servinglib.errors import DataLossError, InvalidArgumentError, StatusCode
from servinglib.loaders.python import PythonLoader, PythonPlatformConfig, PythonServable
from servinglib.loaders.warmup import MAX_WARMUP_RECORDS, WARMUP_FILE, WarmupOptions
from servinglib.protos import example_pb2, prediction_log_pb2
from servinglib.testing import FakeClock, write_python_model

COUNTING_MODEL = """
import numpy as np
from servinglib.loaders import PythonModel, signature
from servinglib.servable import CLASSIFY_METHOD, TensorSpec

class Model(PythonModel):
    def load(self, path):
        self.calls = []
        self.unloaded = False

    def unload(self):
        self.unloaded = True

    @signature(
        name="serving_default",
        inputs=[TensorSpec("x", "float32", [-1])],
        outputs=[TensorSpec("y", "float32", [-1])],
    )
    def predict(self, x):
        self.calls.append(("predict", x.tolist()))
        return {"y": x}

    @signature(
        name="classify",
        inputs=[TensorSpec("inputs", object, [-1])],
        outputs=[TensorSpec("scores", "float32", [-1])],
        method_name=CLASSIFY_METHOD,
    )
    def classify(self, inputs):
        self.calls.append(("classify", list(inputs)))
        return {"scores": np.zeros(len(inputs))}
"""


def predict_log(values: list[float], signature_name: str = "") -> bytes:
    """A serialized PredictionLog holding a predict request for input x."""
    log = prediction_log_pb2.PredictionLog()
    request = log.predict_log.request
    request.model_spec.name = "m"
    request.model_spec.signature_name = signature_name
    request.inputs["x"].CopyFrom(from_numpy(np.array(values, np.float32)))
    return log.SerializeToString()


def model_dir(tmp_path: Path, records: list[bytes] | None = None) -> Path:
    """A Python model version directory, with a warmup file holding ``records`` if given."""
    path = write_python_model(tmp_path, "m", COUNTING_MODEL) / "1"
    if records is not None:
        (path / "assets.extra").mkdir()
        write_records(path / WARMUP_FILE, records)
    return path


def loaded(path: Path, warmup: WarmupOptions | None = None) -> tuple[PythonLoader, list[object]]:
    config = PythonPlatformConfig(allow_code_execution=True, warmup=warmup or WarmupOptions())
    loader = PythonLoader(str(path), config)
    loader.load()
    servable = loader.servable()
    assert isinstance(servable, PythonServable)
    return loader, servable.model.calls  # type: ignore[attr-defined]


def test_predict_records_are_replayed_before_load_returns(tmp_path: Path) -> None:
    """Every predict record is replayed once, in order, during load()."""
    loader, calls = loaded(model_dir(tmp_path, [predict_log([1.0]), predict_log([2.0, 3.0])]))
    assert calls == [("predict", [1.0]), ("predict", [2.0, 3.0])]
    assert loader.warmup_records == 2


def test_iterations_repeat_each_record(tmp_path: Path) -> None:
    """num_request_iterations replays each record that many times."""
    _, calls = loaded(
        model_dir(tmp_path, [predict_log([1.0])]), WarmupOptions(num_request_iterations=3)
    )
    assert len(calls) == 3


def test_no_file_or_disabled_means_no_warmup(tmp_path: Path) -> None:
    """Without a warmup file, or with warmup disabled, nothing is replayed."""
    _, calls = loaded(model_dir(tmp_path / "a"))
    assert calls == []
    _, calls = loaded(model_dir(tmp_path / "b", [predict_log([1.0])]), WarmupOptions(enabled=False))
    assert calls == []


def test_classify_records_send_serialized_examples_merged_with_context(tmp_path: Path) -> None:
    """A classify record calls its signature with the serialized examples, context merged in."""
    log = prediction_log_pb2.PredictionLog()
    request = log.classify_log.request
    request.model_spec.signature_name = "classify"
    with_context = request.input.example_list_with_context
    with_context.context.CopyFrom(make_example({"country": b"nz", "age": 3}))
    with_context.examples.add().CopyFrom(make_example({"age": 40}))
    _, calls = loaded(model_dir(tmp_path, [log.SerializeToString()]))
    ((kind, serialized),) = calls
    assert kind == "classify"
    example = example_pb2.Example.FromString(serialized[0])  # type: ignore[index]
    features = example.features.feature
    assert features["country"].bytes_list.value == [b"nz"]
    assert features["age"].int64_list.value == [40]  # the example's own feature wins
    # TF Serving's bytes: the context's serialization, then the example's.  (A map's entries
    # serialize in no fixed order, so the context's part is compared parsed.)
    own = with_context.examples[0].SerializeToString()  # one feature: one serialization
    sent: bytes = serialized[0]  # type: ignore[index]
    assert sent.endswith(own)
    assert example_pb2.Example.FromString(sent[: -len(own)]) == with_context.context


def test_a_failing_warmup_request_fails_the_load_and_unloads(tmp_path: Path) -> None:
    """A record the model rejects fails load() with the record named, after unloading the model."""
    log = prediction_log_pb2.PredictionLog()
    log.predict_log.request.inputs["not_x"].CopyFrom(from_numpy(np.zeros(1, np.float32)))
    loader = PythonLoader(str(model_dir(tmp_path, [log.SerializeToString()])))
    with pytest.raises(InvalidArgumentError, match=r"Warmup record 0 of .* failed: Unknown input"):
        loader.load()
    assert loader._module_name not in sys.modules  # the model was unloaded


def test_too_many_records_is_an_error(tmp_path: Path) -> None:
    """More than 1000 records fails the load (TF Serving's limit)."""
    records = [predict_log([1.0])] * (MAX_WARMUP_RECORDS + 1)
    with pytest.raises(InvalidArgumentError, match="exceeds the maximum"):
        loaded(model_dir(tmp_path, records))


def test_a_record_that_is_not_a_prediction_log_is_data_loss(tmp_path: Path) -> None:
    """A record that does not parse as a PredictionLog fails the load with DATA_LOSS."""
    with pytest.raises(DataLossError, match=r"Warmup record 0 .* is not a PredictionLog"):
        loaded(model_dir(tmp_path, [b"\xff\xff\xff not a proto"]))


def test_corrupt_warmup_file_fails_the_load_without_retries(tmp_path: Path) -> None:
    """A corrupt warmup file is DATA_LOSS, which the manager does not retry."""
    path = model_dir(tmp_path, [predict_log([1.0])])
    warmup_file = path / WARMUP_FILE
    data = bytearray(warmup_file.read_bytes())
    data[-6] ^= 0xFF  # inside the record's data: its CRC no longer matches
    warmup_file.write_bytes(bytes(data))
    bus: EventBus[ServableState] = EventBus()
    events: list[ServableState] = []
    bus.subscribe(events.append)
    options = ManagerOptions(load_retry=LoadRetryOptions(max_num_load_retries=3))
    with BasicManager(options, event_bus=bus, clock=FakeClock()) as manager:
        servable_id = ServableId("m", 1)
        manager.manage_servable(ServableData.of(servable_id, PythonLoader(str(path))))
        with pytest.raises(DataLossError):
            manager.load_servable(servable_id).result(10)
    end = events[-1]
    assert end.manager_state is ManagerState.END
    assert end.health is not None
    assert end.health.code is StatusCode.DATA_LOSS


def test_available_is_published_only_after_warmup(tmp_path: Path) -> None:
    """When AVAILABLE is published, every warmup record has already been replayed."""
    path = model_dir(tmp_path, [predict_log([1.0]), predict_log([2.0])])
    bus: EventBus[ServableState] = EventBus()
    loader = PythonLoader(str(path))
    seen_at_available: list[int] = []

    def on_event(event: ServableState) -> None:
        if event.manager_state is ManagerState.AVAILABLE:
            servable = loader.servable()
            assert isinstance(servable, PythonServable)
            seen_at_available.append(len(servable.model.calls))  # type: ignore[attr-defined]

    bus.subscribe(on_event)
    with BasicManager(event_bus=bus) as manager:
        manager.manage_servable(ServableData.of(ServableId("m", 1), loader))
        manager.load_servable(ServableId("m", 1)).result(10)
    assert seen_at_available == [2]
