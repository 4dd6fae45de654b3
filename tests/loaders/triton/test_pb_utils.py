"""Tests of triton_python_backend_utils as servinglib provides it (pb_utils and its parts)."""

from __future__ import annotations

import json
import logging
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from servinglib.errors import StatusCode
from servinglib.loaders.triton import pb_utils
from servinglib.loaders.triton.backend_utils_import import (
    MODULE_NAME,
    backend_utils_importable,
)


def _config(**fields: object) -> pb_utils.ModelConfig:
    return pb_utils.ModelConfig(json.dumps({"name": "m", "input": [], "output": [], **fields}))


def test_triton_error_codes_map_to_grpc_codes_as_triton_maps_them() -> None:
    """Each TritonError code becomes the status code Triton's gRPC front end answers with."""
    expected = {
        pb_utils.TritonError.UNKNOWN: StatusCode.UNKNOWN,
        pb_utils.TritonError.INTERNAL: StatusCode.INTERNAL,
        pb_utils.TritonError.NOT_FOUND: StatusCode.NOT_FOUND,
        pb_utils.TritonError.INVALID_ARG: StatusCode.INVALID_ARGUMENT,
        pb_utils.TritonError.UNAVAILABLE: StatusCode.UNAVAILABLE,
        pb_utils.TritonError.UNSUPPORTED: StatusCode.UNIMPLEMENTED,
        pb_utils.TritonError.ALREADY_EXISTS: StatusCode.ALREADY_EXISTS,
        pb_utils.TritonError.CANCELLED: StatusCode.CANCELLED,
    }

    for code, status in expected.items():
        error = pb_utils.TritonError("boom", code).as_serving_error()
        assert (error.code, error.message) == (status, "boom")


def test_triton_error_defaults_to_internal_and_is_no_exception() -> None:
    """TritonError without a code is INTERNAL and, as in Triton, is a value, not an exception."""
    error = pb_utils.TritonError("boom")

    assert error.code() == pb_utils.TritonError.INTERNAL
    assert error.message() == "boom"
    assert not isinstance(error, BaseException)


def test_tensor_keeps_its_name_and_array() -> None:
    """Tensor(name, array) gives both back, with its Triton type and shape."""
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    tensor = pb_utils.Tensor("X", array)

    assert tensor.name() == "X"
    assert tensor.as_numpy() is array
    assert (tensor.triton_dtype(), tensor.shape()) == ("TYPE_FP32", [2, 3])
    assert pb_utils.Tensor("S", np.array([b"a"], dtype=object)).triton_dtype() == "TYPE_STRING"


def test_tensor_refuses_what_is_not_an_array() -> None:
    """A list is not a tensor: TritonModelException names the tensor."""
    with pytest.raises(pb_utils.TritonModelException, match="'X'"):
        pb_utils.Tensor("X", [1, 2])  # type: ignore[arg-type]


def test_lookups_by_name_find_tensors_and_config_entries() -> None:
    """get_*_by_name find tensors of requests and responses and entries of a config dict."""
    x = pb_utils.Tensor("X", np.zeros(1, np.int32))
    sender = pb_utils.InferenceResponseSender(lambda response, final: None, lambda: False)
    request = pb_utils.InferenceRequest.served([x], [], sender, model_name="m", model_version=1)
    response = pb_utils.InferenceResponse([x])
    config = {"input": [{"name": "X"}], "output": [{"name": "Y"}]}

    assert pb_utils.get_input_tensor_by_name(request, "X") is x
    assert pb_utils.get_input_tensor_by_name(request, "Y") is None
    assert pb_utils.get_output_tensor_by_name(response, "X") is x
    assert pb_utils.get_input_config_by_name(config, "X") == {"name": "X"}
    assert pb_utils.get_output_config_by_name(config, "Y") == {"name": "Y"}
    assert pb_utils.get_output_config_by_name(config, "X") is None


def test_type_helpers_agree_with_triton_s() -> None:
    """The type helpers map Triton's type names and numbers as Triton's own module does."""
    assert pb_utils.triton_string_to_numpy("TYPE_FP32") is np.float32
    assert pb_utils.triton_string_to_numpy("TYPE_STRING") is np.object_
    assert pb_utils.triton_to_numpy_type(11) is np.float32
    assert pb_utils.numpy_to_triton_type(np.int64) == 9
    assert pb_utils.numpy_to_triton_type(np.bytes_) == 13
    assert pb_utils.using_decoupled_model_transaction_policy(
        {"model_transaction_policy": {"decoupled": True}}
    )


def test_bytes_tensors_serialize_as_triton_s_wire_form() -> None:
    """serialize_byte_tensor and deserialize_bytes_tensor round-trip items, str as UTF-8."""
    wire = pb_utils.serialize_byte_tensor(np.array([b"ab", "é"], dtype=object))

    assert wire == b"\x02\x00\x00\x00ab\x02\x00\x00\x00\xc3\xa9"
    assert list(pb_utils.deserialize_bytes_tensor(wire)) == [b"ab", "é".encode()]


def test_response_sender_refuses_a_send_after_the_final_flag() -> None:
    """After COMPLETE_FINAL nothing more is delivered: a later send raises."""
    delivered: list[tuple[object, bool]] = []
    sender = pb_utils.InferenceResponseSender(
        lambda response, final: delivered.append((response, final)), lambda: False
    )
    response = pb_utils.InferenceResponse([])

    sender.send(response)
    sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
    with pytest.raises(pb_utils.TritonModelException, match="final"):
        sender.send(response)
    assert delivered == [(response, False), (None, True)]


def test_request_parameters_are_a_json_string() -> None:
    """request.parameters() is the request's parameters as a JSON object, as in Triton."""
    request = pb_utils.InferenceRequest(parameters={"a": 1, "b": "x", "c": True})

    assert json.loads(request.parameters()) == {"a": 1, "b": "x", "c": True}


def test_bls_exec_outside_a_request_answers_an_error() -> None:
    """InferenceRequest.exec() outside a request the server runs is a response with an error."""
    request = pb_utils.InferenceRequest("other", [], ["Y"])

    response = request.exec()
    assert isinstance(response, pb_utils.InferenceResponse)
    assert response.has_error()
    assert "inside a request" in response.error().message()


def test_logger_logs_into_servinglib_s_log(caplog: pytest.LogCaptureFixture) -> None:
    """pb_utils.Logger's methods log at the matching level (VERBOSE as DEBUG)."""
    with caplog.at_level(logging.DEBUG, logger="servinglib.triton.model"):
        pb_utils.Logger.log_info("i")
        pb_utils.Logger.log_warn("w")
        pb_utils.Logger.log_error("e")
        pb_utils.Logger.log_verbose("v")
        pb_utils.Logger.log("x", pb_utils.Logger.ERROR)

    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, "i"),
        (logging.WARNING, "w"),
        (logging.ERROR, "e"),
        (logging.DEBUG, "v"),
        (logging.ERROR, "x"),
    ]


def test_model_config_adds_inputs_outputs_and_batching() -> None:
    """auto_complete's ModelConfig adds tensors, sets max_batch_size, batching and decoupled."""
    config = _config(max_batch_size=0)

    config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [2]})
    config.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [2]})
    config.set_max_batch_size(4)
    config.set_dynamic_batching()
    config.set_model_transaction_policy({"decoupled": True})

    assert config.as_dict() == {
        "name": "m",
        "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [2]}],
        "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [2]}],
        "max_batch_size": 4,
        "dynamic_batching": {},
        "model_transaction_policy": {"decoupled": True},
    }


def test_model_config_refuses_to_contradict_the_config() -> None:
    """A data type, dims, smaller max_batch_size or decoupled other than configured: ValueError."""
    config = _config(
        max_batch_size=8,
        input=[{"name": "X", "data_type": "TYPE_FP32", "dims": [2]}],
        model_transaction_policy={"decoupled": False},
    )

    with pytest.raises(ValueError, match="expects datatype TYPE_FP32"):
        config.add_input({"name": "X", "data_type": "TYPE_INT32", "dims": [2]})
    with pytest.raises(ValueError, match="dims"):
        config.add_input({"name": "X", "data_type": "TYPE_FP32", "dims": [3]})
    with pytest.raises(ValueError, match="max_batch_size 8"):
        config.set_max_batch_size(4)
    with pytest.raises(ValueError, match="decoupled"):
        config.set_model_transaction_policy({"decoupled": True})
    with pytest.raises(ValueError, match="other than"):
        config.add_output({"name": "Y", "data_type": "TYPE_FP32", "dims": [1], "shape": [1]})
    with pytest.raises(ValueError, match="missing 'dims'"):
        config.add_output({"name": "Y", "data_type": "TYPE_FP32"})


def test_the_module_is_importable_under_triton_s_name_only_inside_the_block() -> None:
    """import triton_python_backend_utils gives pb_utils inside backend_utils_importable only."""
    assert MODULE_NAME not in sys.modules

    with backend_utils_importable():
        import triton_python_backend_utils  # type: ignore[import-not-found]  # the alias

        assert triton_python_backend_utils is pb_utils
    assert MODULE_NAME not in sys.modules


def test_nested_blocks_on_threads_keep_the_name_until_the_last_ends() -> None:
    """Two loads at once share the name; it goes when the last of them ends."""
    inside, release = threading.Event(), threading.Event()

    def other_load() -> None:
        with backend_utils_importable():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other_load)
    thread.start()
    assert inside.wait(10)
    with backend_utils_importable():
        pass
    assert sys.modules.get(MODULE_NAME) is pb_utils
    release.set()
    thread.join(10)
    assert MODULE_NAME not in sys.modules


def test_a_real_module_of_that_name_is_never_shadowed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where a triton_python_backend_utils is importable (Triton's own), that one is imported."""
    (tmp_path / f"{MODULE_NAME}.py").write_text("REAL = True\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))

    try:
        with backend_utils_importable():
            import triton_python_backend_utils

            assert triton_python_backend_utils.REAL is True
    finally:
        sys.modules.pop(MODULE_NAME, None)
