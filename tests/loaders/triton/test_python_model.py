"""Tests of Triton Python-backend models served by the python platform (in process)."""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from servinglib.errors import ServingError, StatusCode
from servinglib.loaders import PythonPlatformConfig
from servinglib.loaders.triton import pb_utils
from servinglib.loaders.triton.backend_utils_import import MODULE_NAME
from servinglib.loaders.triton.python_model import TritonPythonServable
from servinglib.request_extras import RequestExtras, request_extras_scope
from servinglib.servable import call_signature, deadline_scope
from servinglib.server import (
    ModelConfig,
    ModelServerConfig,
    ModelSpec,
    ServerCore,
    ServerCoreOptions,
)
from servinglib.testing import triton_python_model
from tests.triton.python_models import (
    write_add_sub,
    write_auto_complete,
    write_bytes_echo,
    write_errors,
    write_recorder,
    write_repeat,
)

A = np.array([[1, 2, 3, 4], [10, 20, 30, 40]], dtype=np.float32)
B = np.array([[4, 3, 2, 1], [1, 1, 1, 1]], dtype=np.float32)


def _recorded(outputs: dict[str, np.ndarray], name: str) -> dict[str, object]:
    value: dict[str, object] = json.loads(outputs[name][0])
    return value


def _write_model(repository: Path, name: str, model_py: str, config: str | None = None) -> Path:
    model = repository / name
    (model / "1").mkdir(parents=True)
    (model / "1" / "model.py").write_text(model_py, encoding="utf-8")
    if config is not None:
        (model / "config.pbtxt").write_text(config, encoding="utf-8")
    return model


def test_add_sub_answers_its_sum_and_difference(tmp_path: Path) -> None:
    """Triton's add_sub example serves unchanged: one signature, the config's tensors."""
    with triton_python_model(write_add_sub(tmp_path)) as model:
        outputs = model.call(None, {"INPUT0": A, "INPUT1": B})
        with model.handle() as handle:
            ((name, spec),) = handle.servable.signatures.items()

    np.testing.assert_array_equal(outputs["OUTPUT0"], A + B)
    np.testing.assert_array_equal(outputs["OUTPUT1"], A - B)
    assert name == "serving_default"
    assert spec.inputs["INPUT0"].shape == (-1, 4)  # max_batch_size 8: the batch dimension first
    assert MODULE_NAME not in sys.modules  # the alias lived while model.py was imported


def test_initialize_gets_triton_s_args(tmp_path: Path) -> None:
    """initialize(args) gets Triton's keys: the completed config as JSON, the model's directory."""
    model_dir = write_recorder(tmp_path)

    with triton_python_model(model_dir) as model:
        outputs = model.call(None, {"IN": np.array([b"x"], dtype=object)})

    args = _recorded(outputs, "ARGS")
    config = json.loads(str(args.pop("model_config")))
    assert args == {
        "model_instance_kind": "CPU",
        "model_instance_name": "recorder_0",
        "model_instance_device_id": "0",
        "model_repository": str(model_dir),
        "model_version": "1",
        "model_name": "recorder",
    }
    assert config["name"] == "recorder"
    assert config["max_batch_size"] == 0
    assert config["input"][0]["name"] == "IN"
    assert config["input"][0]["data_type"] == "TYPE_STRING"
    assert config["input"][0]["dims"] == [1]
    assert config["parameters"] == {"greeting": {"string_value": "hello"}}
    assert "model_transaction_policy" not in config  # Triton leaves it out unless set
    assert "optimization" not in config  # Triton's optimization defaults are not ours


def test_a_request_sees_its_id_parameters_and_requested_outputs(tmp_path: Path) -> None:
    """request_id(), parameters() and requested_output_names() are the front end's request's."""
    extras = RequestExtras.of_request("req-7", {"p": 3, "sequence_id": 42, "q": "x"})

    with triton_python_model(write_recorder(tmp_path)) as model, request_extras_scope(extras):
        outputs = model.call(None, {"IN": np.array([b"x"], dtype=object)}, ["REQUEST"])

    assert list(outputs) == ["REQUEST"]
    assert _recorded(outputs, "REQUEST") == {
        "request_id": "req-7",
        "correlation_id": 42,
        "parameters": {"p": 3, "q": "x"},
        "requested_output_names": ["REQUEST"],
        "is_cancelled": False,
    }


def test_a_request_past_its_deadline_is_cancelled(tmp_path: Path) -> None:
    """request.is_cancelled() is True once the request's deadline has passed."""
    with triton_python_model(write_recorder(tmp_path)) as model:
        with deadline_scope(time.monotonic() - 1):
            late = model.call(None, {"IN": np.array([b"x"], dtype=object)})
        with deadline_scope(time.monotonic() + 600):
            early = model.call(None, {"IN": np.array([b"x"], dtype=object)})

    assert _recorded(late, "REQUEST")["is_cancelled"] is True
    assert _recorded(early, "REQUEST")["is_cancelled"] is False


def test_no_requested_outputs_asks_for_all_of_the_config_s(tmp_path: Path) -> None:
    """A request naming no outputs hands execute every output of the config, as Triton does."""
    with triton_python_model(write_recorder(tmp_path)) as model:
        outputs = model.call(None, {"IN": np.array([b"x"], dtype=object)})

    seen = _recorded(outputs, "REQUEST")
    assert seen["requested_output_names"] == ["ARGS", "REQUEST"]
    assert (seen["request_id"], seen["parameters"]) == ("", {})


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (0, StatusCode.UNKNOWN),
        (1, StatusCode.INTERNAL),
        (2, StatusCode.NOT_FOUND),
        (3, StatusCode.INVALID_ARGUMENT),
        (4, StatusCode.UNAVAILABLE),
        (5, StatusCode.UNIMPLEMENTED),
        (6, StatusCode.ALREADY_EXISTS),
        (7, StatusCode.CANCELLED),
        (-2, StatusCode.INTERNAL),
    ],
)
def test_a_response_s_triton_error_fails_its_request_with_its_code(
    tmp_path: Path, code: int, status: StatusCode
) -> None:
    """InferenceResponse(error=TritonError(msg, code)) fails the request with code and message."""
    with triton_python_model(write_errors(tmp_path)) as model:
        with pytest.raises(ServingError) as raised:
            model.call(None, {"CODE": np.array([code], np.int32)})
        answer = model.call(None, {"CODE": np.array([21], np.int32)})

    assert raised.value.code is status
    assert raised.value.message == ("no code given" if code == -2 else f"failed with code {code}")
    np.testing.assert_array_equal(answer["OUT"], [42])  # the model serves on


def test_an_exception_from_execute_fails_the_request_as_internal(tmp_path: Path) -> None:
    """An exception raised by execute is INTERNAL, naming it."""
    with (
        triton_python_model(write_errors(tmp_path)) as model,
        pytest.raises(ServingError) as raised,
    ):
        model.call(None, {"CODE": np.array([-1], np.int32)})

    assert raised.value.code is StatusCode.INTERNAL
    assert raised.value.message.startswith(
        "Failed to process the request(s) for model 'errors_0', message: "
        "TritonModelException: execute gave up"
    )


def test_several_requests_fail_alone_or_together(tmp_path: Path) -> None:
    """Given several requests, an error response fails its own; an exception fails every one."""
    with triton_python_model(write_errors(tmp_path)) as model, model.handle() as handle:
        servable = handle.servable
        assert isinstance(servable, TritonPythonServable)

        def outcomes(codes: list[int]) -> list[object]:
            requests = [servable.pending({"CODE": np.array([c], np.int32)}) for c in codes]
            return [
                o.code if isinstance(o, ServingError) else "ok"
                for o in servable.execute_requests(requests)
            ]

        assert outcomes([21, 3, 21]) == ["ok", StatusCode.INVALID_ARGUMENT, "ok"]
        assert outcomes([21, -1, 21]) == [StatusCode.INTERNAL] * 3


def test_a_batch_larger_than_max_batch_size_is_an_invalid_argument(tmp_path: Path) -> None:
    """More rows than max_batch_size (8 for add_sub): INVALID_ARGUMENT, as Triton answers."""
    rows = np.ones((9, 4), np.float32)

    with (
        triton_python_model(write_add_sub(tmp_path)) as model,
        pytest.raises(ServingError) as raised,
    ):
        model.call(None, {"INPUT0": rows, "INPUT1": rows})

    assert raised.value.code is StatusCode.INVALID_ARGUMENT
    assert raised.value.message == "inference request batch-size must be <= 8 for 'add_sub'"


def test_auto_complete_config_declares_a_model_without_config_pbtxt(tmp_path: Path) -> None:
    """With no config.pbtxt, the tensors auto_complete_config adds are the signature's."""
    with triton_python_model(write_auto_complete(tmp_path)) as model:
        outputs = model.call(None, {"X": np.array([[1, 2]], np.float32)})
        with model.handle() as handle:
            spec = handle.servable.signatures["serving_default"]

    np.testing.assert_array_equal(outputs["Y"], [[2, 3]])
    assert (spec.inputs["X"].shape, spec.outputs["Y"].shape) == ((-1, 2), (-1, 2))


def test_auto_complete_config_contradicting_config_pbtxt_fails_the_load(tmp_path: Path) -> None:
    """auto_complete_config changing a configured input's type fails the load, naming it."""
    model_dir = write_auto_complete(tmp_path)
    (model_dir / "config.pbtxt").write_text(
        'backend: "python"\ninput [ { name: "X" data_type: TYPE_INT32 dims: [ 2 ] } ]\n',
        encoding="utf-8",
    )
    harness = triton_python_model(model_dir)

    with pytest.raises(AssertionError) as raised:
        harness.__enter__()

    cause = raised.value.__cause__
    assert isinstance(cause, ServingError)
    assert cause.code is StatusCode.INVALID_ARGUMENT
    assert "configuration expects datatype TYPE_INT32 for input 'X'" in cause.message


def test_bytes_tensors_arrive_and_leave_as_object_arrays_of_bytes(tmp_path: Path) -> None:
    """A BYTES input is an object array of bytes; a BYTES output is answered as one."""
    text = np.array([b"ab", b"", "é".encode()], dtype=object)

    with triton_python_model(write_bytes_echo(tmp_path)) as model:
        outputs = model.call(None, {"TEXT": text})

    assert outputs["UPPER"].dtype == np.object_
    assert list(outputs["UPPER"]) == [b"AB", b"", "é".encode()]
    np.testing.assert_array_equal(outputs["LENGTH"], [2, 0, 2])


def test_str_items_of_an_output_are_answered_as_utf8(tmp_path: Path) -> None:
    """A BYTES output holding str items (Triton encodes them) is answered as UTF-8 bytes."""
    model_py = (
        "import numpy as np\nimport triton_python_backend_utils as pb_utils\n"
        "class TritonPythonModel:\n"
        "    def execute(self, requests):\n"
        "        out = pb_utils.Tensor('S', np.array(['é', 'b'], dtype=np.object_))\n"
        "        return [pb_utils.InferenceResponse([out]) for _ in requests]\n"
    )
    config = (
        'backend: "python"\ninput [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "S" data_type: TYPE_STRING dims: [ 2 ] } ]\n'
    )

    with triton_python_model(_write_model(tmp_path, "s", model_py, config)) as model:
        outputs = model.call(None, {"X": np.array([1], np.int32)})

    assert list(outputs["S"]) == ["é".encode(), b"b"]


def test_a_decoupled_model_streams_the_responses_its_sender_sends(tmp_path: Path) -> None:
    """A decoupled model's signature streams each response sent, until the final flag."""
    with triton_python_model(write_repeat(tmp_path)) as model:
        parts = model.call_stream(None, {"IN": np.array([5, 6, 7], np.int32)})
        none = model.call_stream(None, {"IN": np.zeros((0,), np.int32)})
        with pytest.raises(ServingError) as whole:
            model.call(None, {"IN": np.array([5], np.int32)})

    assert [(p["OUT"].tolist(), p["IDX"].tolist()) for p in parts] == [
        ([5], [0]),
        ([6], [1]),
        ([7], [2]),
    ]
    assert none == []
    assert whole.value.code is StatusCode.FAILED_PRECONDITION


def test_a_decoupled_error_response_ends_the_stream_with_its_code(tmp_path: Path) -> None:
    """A decoupled response carrying a TritonError ends the stream with that error."""
    model_py = (
        "import numpy as np\nimport triton_python_backend_utils as pb_utils\n"
        "class TritonPythonModel:\n"
        "    def execute(self, requests):\n"
        "        sender = requests[0].get_response_sender()\n"
        "        out = pb_utils.Tensor('Y', np.array([1], np.int32))\n"
        "        sender.send(pb_utils.InferenceResponse([out]))\n"
        "        error = pb_utils.TritonError('gone', pb_utils.TritonError.NOT_FOUND)\n"
        "        sender.send(pb_utils.InferenceResponse(error=error),\n"
        "                    flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)\n"
    )
    config = (
        'backend: "python"\nmodel_transaction_policy { decoupled: true }\n'
        'input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
    )

    model = triton_python_model(_write_model(tmp_path, "d", model_py, config))
    with model, pytest.raises(ServingError) as raised:
        model.call_stream(None, {"X": np.array([1], np.int32)})

    assert (raised.value.code, raised.value.message) == (StatusCode.NOT_FOUND, "gone")


def test_a_model_that_is_not_decoupled_may_answer_through_its_sender(tmp_path: Path) -> None:
    """execute returning None after sending one response per request answers them (24.06+)."""
    model_py = (
        "import numpy as np\nimport triton_python_backend_utils as pb_utils\n"
        "class TritonPythonModel:\n"
        "    def execute(self, requests):\n"
        "        for request in requests:\n"
        "            out = pb_utils.Tensor('Y', request.inputs()[0].as_numpy() + 1)\n"
        "            request.get_response_sender().send(pb_utils.InferenceResponse([out]),\n"
        "                flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)\n"
    )
    config = (
        'backend: "python"\ninput [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
    )

    with triton_python_model(_write_model(tmp_path, "s", model_py, config)) as model:
        outputs = model.call(None, {"X": np.array([1], np.int32)})

    np.testing.assert_array_equal(outputs["Y"], [2])


def test_finalize_runs_when_the_version_unloads(tmp_path: Path) -> None:
    """finalize() runs once, when the version unloads."""
    marker = tmp_path / "finalized"
    model_py = (
        "import numpy as np\nimport triton_python_backend_utils as pb_utils\n"
        "class TritonPythonModel:\n"
        "    def execute(self, requests):\n"
        "        return [pb_utils.InferenceResponse([r.inputs()[0]]) for r in requests]\n"
        "    def finalize(self):\n"
        f"        with open({str(marker)!r}, 'a') as f: f.write('x')\n"
    )
    config = (
        'backend: "python"\ninput [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
    )

    with triton_python_model(_write_model(tmp_path, "f", model_py, config)) as model:
        model.call(None, {"X": np.array([1], np.int32)})
        assert not marker.exists()

    assert marker.read_text() == "x"


def test_unimplemented_config_fields_are_named_once_at_load(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Config fields servinglib does not implement are logged once, by name, when it loads."""
    model_dir = write_add_sub(tmp_path)
    with (model_dir / "config.pbtxt").open("a", encoding="utf-8") as config:
        config.write("optimization { priority: PRIORITY_MAX }\n")

    with caplog.at_level(logging.WARNING), triton_python_model(model_dir) as model:
        model.call(None, {"INPUT0": A, "INPUT1": B})
        model.call(None, {"INPUT0": A, "INPUT1": B})

    named = [r.getMessage() for r in caplog.records if "optimization" in r.getMessage()]
    assert len(named) == 1
    assert "model_transaction_policy" not in named[0]


def test_a_model_directory_with_neither_class_fails_naming_both(tmp_path: Path) -> None:
    """A model.py defining neither a PythonModel nor a TritonPythonModel fails the load."""
    harness = triton_python_model(_write_model(tmp_path, "none", "X = 1\n"))

    with pytest.raises(AssertionError) as raised:
        harness.__enter__()

    assert isinstance(raised.value.__cause__, ServingError)
    assert "TritonPythonModel" in raised.value.__cause__.message


def test_pb_utils_is_the_module_models_import(tmp_path: Path) -> None:
    """The module a model imported is servinglib's pb_utils (also after the load ends)."""
    model_py = (
        "import numpy as np\nimport triton_python_backend_utils as pb_utils\n"
        "class TritonPythonModel:\n"
        "    def execute(self, requests):\n"
        "        file = np.array([pb_utils.__file__.encode()], dtype=object)\n"
        "        return [pb_utils.InferenceResponse([pb_utils.Tensor('F', file)])\n"
        "                for _ in requests]\n"
    )
    config = (
        'backend: "python"\ninput [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]\n'
        'output [ { name: "F" data_type: TYPE_STRING dims: [ 1 ] } ]\n'
    )

    with triton_python_model(_write_model(tmp_path, "m", model_py, config)) as model:
        outputs = model.call(None, {"X": np.array([1], np.int32)})

    assert os.fsdecode(outputs["F"][0]) == pb_utils.__file__


def test_a_triton_model_runs_in_a_model_process_of_its_own(tmp_path: Path) -> None:
    """With model_process=True a Triton model loads and answers from its own process, errors
    with their codes."""
    write_add_sub(tmp_path)
    write_errors(tmp_path)
    config = ModelServerConfig(
        [ModelConfig(name, str(tmp_path / name), "python") for name in ("add_sub", "errors")]
    )
    python = PythonPlatformConfig(allow_code_execution=True, model_process=True)

    with ServerCore(config, ServerCoreOptions(platform_configs={"python": python})) as core:
        with core.servable_handle(ModelSpec.latest("add_sub")) as handle:
            outputs = call_signature(handle.servable, None, {"INPUT0": A, "INPUT1": B})
        errors = core.servable_handle(ModelSpec.latest("errors"))
        with errors as handle, pytest.raises(ServingError) as raised:
            call_signature(handle.servable, None, {"CODE": np.array([2], np.int32)})

    np.testing.assert_array_equal(outputs["OUTPUT0"], A + B)
    assert (raised.value.code, raised.value.message) == (StatusCode.NOT_FOUND, "failed with code 2")
