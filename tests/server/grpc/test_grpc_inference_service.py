"""KServe V2 GRPCInferenceService through tritonclient.grpc: infer, metadata, config, repository."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
import tritonclient.grpc as triton
from grpc_servers import Served, serving, write_python_model
from tritonclient.utils import InferenceServerException

from servinglib.protos import grpc_service_pb2
from servinglib.server.config import ModelServerConfig
from servinglib.server.management.model_management import ModelManagementOptions
from servinglib.server.server_core import ServerCore
from servinglib.testing.plugin import TEST_SERVER_CORE_OPTIONS


@pytest.fixture
def client(served: Served) -> Iterator[triton.InferenceServerClient]:
    """tritonclient's gRPC client on the module's server."""
    client = triton.InferenceServerClient(served.address)
    yield client
    client.close()


def infer_input(name: str, value: np.ndarray, datatype: str, *, raw: bool) -> triton.InferInput:
    """An InferInput carrying ``value`` as raw contents or typed contents."""
    tensor = triton.InferInput(name, list(value.shape), datatype)
    if raw:
        tensor.set_data_from_numpy(value)
    else:
        field = {"FP32": "fp32_contents", "BYTES": "bytes_contents", "INT32": "int_contents"}
        getattr(tensor._input.contents, field[datatype]).extend(value.tolist())
    return tensor


@pytest.mark.parametrize("raw", [True, False])
def test_infer_raw_and_typed(client: triton.InferenceServerClient, raw: bool) -> None:
    """Infer with raw or typed contents answers y = 0.5x + 2 (python_half_plus_two), raw."""
    x = np.array([1.0, 2.0, 5.0], np.float32)
    result = client.infer(
        "python_half_plus_two", [infer_input("x", x, "FP32", raw=raw)], request_id="r-1"
    )
    assert result.as_numpy("y").tolist() == [2.5, 3.0, 4.5]
    response = result.get_response()
    assert (response.model_name, response.model_version, response.id) == (
        "python_half_plus_two",
        "1",
        "r-1",
    )
    assert len(response.raw_output_contents) == 1  # raw outputs whatever the inputs, as Triton


def test_infer_every_datatype_and_requested_outputs(client: triton.InferenceServerClient) -> None:
    """All V2 numeric datatypes round-trip as raw contents; requested outputs limit the answer."""
    values = {
        "b": np.array([True, False]),
        "i8": np.array([-128, 127], np.int8),
        "i16": np.array([-3, 4], np.int16),
        "i32": np.array([-5, 6], np.int32),
        "i64": np.array([-(2**40), 2**40], np.int64),
        "u8": np.array([0, 255], np.uint8),
        "u16": np.array([1, 65535], np.uint16),
        "u32": np.array([1, 2**32 - 1], np.uint32),
        "u64": np.array([1, 2**64 - 1], np.uint64),
        "f16": np.array([0.5, -2.0], np.float16),
        "f32": np.array([1.5, -2.5], np.float32),
        "f64": np.array([1e300, -1e-300], np.float64),
    }
    inputs = []
    for name, value in values.items():
        datatype = triton.np_to_triton_dtype(value.dtype)
        inputs.append(infer_input(name, value, datatype, raw=True))
    outputs = [triton.InferRequestedOutput("u64"), triton.InferRequestedOutput("f16")]
    result = client.infer("py", inputs, outputs=outputs, parameters={"signature_name": "types"})
    assert [o.name for o in result.get_response().outputs] == ["u64", "f16"]
    assert result.as_numpy("u64").tolist() == values["u64"].tolist()
    assert result.as_numpy("f16").tolist() == values["f16"].tolist()


def test_infer_bf16_and_bytes(client: triton.InferenceServerClient) -> None:
    """BF16 travels raw; BYTES travel typed or raw."""
    h = np.array([1.5, -2.0], ml_dtypes.bfloat16)
    tensor = triton.InferInput("h", [2], "BF16")
    tensor._raw_content = h.tobytes()
    tensor._input.ClearField("contents")
    result = client.infer("py", [tensor], parameters={"signature_name": "bf16"})
    raw = result.get_response().raw_output_contents[0]
    assert np.frombuffer(raw, ml_dtypes.bfloat16).tolist() == [3.0, -4.0]
    strings = np.array([b"ab", b"c"], dtype=object)
    for raw_contents in (True, False):
        result = client.infer(
            "py",
            [infer_input("s", strings, "BYTES", raw=raw_contents)],
            parameters={"signature_name": "strings"},
        )
        assert result.as_numpy("upper").tolist() == [b"AB", b"C"]


@pytest.mark.parametrize(
    ("mutate", "words"),
    [
        (lambda r: setattr(r.inputs[0], "datatype", "FP99"), "FP99"),
        (lambda r: r.inputs[0].shape.append(2), "'x'"),
        (lambda r: r.inputs[0].contents.fp32_contents.append(1.0), "'x'"),
        (lambda r: setattr(r.inputs[0], "name", "w"), "'w'"),
        (lambda r: setattr(r, "model_version", "v1"), "v1"),
        (lambda r: setattr(r, "model_version", "²"), "²"),  # a digit to isdigit(), not to int()
    ],
)
def test_infer_client_mistakes_are_invalid_argument(
    served: Served, mutate: object, words: str
) -> None:
    """Bad datatypes, sizes, mixed raw+typed contents, names and versions: INVALID_ARGUMENT."""
    import grpc

    request = grpc_service_pb2.ModelInferRequest(model_name="py")
    request.inputs.add(name="x", datatype="FP32", shape=[1])
    request.raw_input_contents.append(np.array([1.0], np.float32).tobytes())
    mutate(request)  # type: ignore[operator]
    with served.channel() as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer")
        with pytest.raises(grpc.RpcError) as caught:
            call(request.SerializeToString(), timeout=30)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert words in caught.value.details()


def test_unknown_model_is_not_found(client: triton.InferenceServerClient) -> None:
    """Infer on a model the server does not know fails with NOT_FOUND naming it."""
    x = np.array([1.0], np.float32)
    with pytest.raises(InferenceServerException) as caught:
        client.infer("nope", [infer_input("x", x, "FP32", raw=True)])
    assert caught.value.status() == "StatusCode.NOT_FOUND"
    assert "nope" in caught.value.message()


def test_health_metadata_and_config(client: triton.InferenceServerClient) -> None:
    """Live, ready, server and model metadata and model config answer as tritonclient expects."""
    assert client.is_server_live()
    assert client.is_server_ready()
    assert client.is_model_ready("half_plus_two")
    assert client.is_model_ready("half_plus_two", "1")
    assert not client.is_model_ready("half_plus_two", "3")
    assert not client.is_model_ready("nope")
    server = client.get_server_metadata()
    assert server.name == "servinglib"
    assert "model_repository" in server.extensions
    metadata = client.get_model_metadata("half_plus_two")
    assert list(metadata.versions) == ["1", "2"]
    assert [(t.name, t.datatype, list(t.shape)) for t in metadata.inputs] == [("x", "FP32", [-1])]
    config = client.get_model_config("python_half_plus_two").config
    assert config.name == "python_half_plus_two"
    assert [(i.name, i.data_type, list(i.dims)) for i in config.input] == [
        ("x", triton.model_config_pb2.TYPE_FP32, [-1])
    ]


@pytest.fixture
def repository(tmp_path: Path) -> Iterator[tuple[triton.InferenceServerClient, Path]]:
    """A client of a server over a core of its own (model "a"), and the models' root."""
    config = ModelServerConfig([write_python_model(tmp_path, "a")])
    management = ModelManagementOptions(enabled=True, allow_python_models=True)
    with ServerCore(config, TEST_SERVER_CORE_OPTIONS) as core, serving(core, management) as served:
        client = triton.InferenceServerClient(served.address)
        yield client, tmp_path
        client.close()


def test_repository_unload_and_load(
    repository: tuple[triton.InferenceServerClient, Path],
) -> None:
    """Unload takes a model out, load brings it back, a config parameter adds a new one."""
    client, root = repository
    index = client.get_model_repository_index()
    assert [(m.name, m.version, m.state) for m in index.models] == [("a", "1", "READY")]
    client.unload_model("a")
    assert not client.is_model_ready("a")
    assert ("a", "UNAVAILABLE") in [
        (m.name, m.state) for m in client.get_model_repository_index().models
    ]
    assert not [m for m in client.get_model_repository_index().models if m.state == "READY"]
    client.load_model("a")
    assert client.is_model_ready("a")
    write_python_model(root, "b")
    client.load_model("b", config=f'{{"base_path": "{root / "b"}", "platform": "python"}}')
    assert client.is_model_ready("b")
    with pytest.raises(InferenceServerException) as caught:
        client.load_model("c")
    assert caught.value.status() == "StatusCode.NOT_FOUND"
    with pytest.raises(InferenceServerException) as caught:
        client.unload_model("c")
    assert caught.value.status() == "StatusCode.NOT_FOUND"
