"""KServe V2 in process: datatypes, nested and flat data, requested outputs, binary extension."""

from __future__ import annotations

import json
import struct

import ml_dtypes
import numpy as np
import pytest

from servinglib.codecs import encode_raw
from tests.server.rest.conftest import Client

ALL_TYPES_PARAMETERS = {"signature_name": "all_types"}
SAMPLES: dict[str, tuple[str, np.ndarray]] = {
    "bool": ("BOOL", np.array([[True, False]])),
    "int8": ("INT8", np.array([[-128, 127]], np.int8)),
    "int16": ("INT16", np.array([[-1, 2]], np.int16)),
    "int32": ("INT32", np.array([[-(2**31), 2**31 - 1]], np.int32)),
    "int64": ("INT64", np.array([[-(2**63), 2**63 - 1]], np.int64)),
    "uint8": ("UINT8", np.array([[0, 255]], np.uint8)),
    "uint16": ("UINT16", np.array([[0, 65535]], np.uint16)),
    "uint32": ("UINT32", np.array([[0, 2**32 - 1]], np.uint32)),
    "uint64": ("UINT64", np.array([[0, 2**64 - 1]], np.uint64)),
    "fp16": ("FP16", np.array([[0.5, -1.25]], np.float16)),
    "fp32": ("FP32", np.array([[0.25, 3.5]], np.float32)),
    "fp64": ("FP64", np.array([[1e-300, 2.5]], np.float64)),
    "bf16": ("BF16", np.array([[1.5, -2.0]], ml_dtypes.bfloat16)),
    "bytes": ("BYTES", np.array([[b"a", "é".encode()]], dtype=object)),
}


def json_inputs() -> list[dict[str, object]]:
    inputs = []
    for name, (datatype, array) in SAMPLES.items():
        data = (
            [item.decode() for item in array.reshape(-1)]
            if datatype == "BYTES"
            else array.astype(np.float32 if datatype == "BF16" else array.dtype).tolist()
        )
        inputs.append({"name": name, "datatype": datatype, "shape": [1, 2], "data": data})
    return inputs


def binary_request(outputs_binary: bool) -> tuple[bytes, int]:
    inputs, parts = [], []
    for name, (datatype, array) in SAMPLES.items():
        _, raw = encode_raw(array)
        inputs.append(
            {
                "name": name,
                "datatype": datatype,
                "shape": [1, 2],
                "parameters": {"binary_data_size": len(raw)},
            }
        )
        parts.append(raw)
    header = json.dumps(
        {
            "inputs": inputs,
            "parameters": {**ALL_TYPES_PARAMETERS, "binary_data_output": outputs_binary},
        }
    ).encode()
    return header + b"".join(parts), len(header)


def test_json_infer_round_trips_every_datatype(client: Client) -> None:
    """Every V2 datatype goes in and comes back as JSON data with its datatype and shape."""
    response = client.post(
        "/v2/models/toy/infer",
        json={"id": "r1", "inputs": json_inputs(), "parameters": ALL_TYPES_PARAMETERS},
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["model_name"], body["model_version"], body["id"]) == ("toy", "1", "r1")
    outputs = {o["name"]: o for o in body["outputs"]}
    for name, (datatype, array) in SAMPLES.items():
        output = outputs[f"out_{name}"]
        assert (output["datatype"], output["shape"]) == (datatype, [1, 2])
        if datatype == "BYTES":
            assert output["data"] == [item.decode() for item in array.reshape(-1)]
        else:
            assert output["data"] == array.reshape(-1).tolist()


def test_binary_infer_round_trips_every_datatype(client: Client) -> None:
    """Triton's binary extension: raw inputs after the JSON header, raw outputs back."""
    body, header_length = binary_request(outputs_binary=True)
    response = client.post(
        "/v2/models/toy/infer",
        content=body,
        headers={"Inference-Header-Content-Length": str(header_length)},
    )
    assert response.status_code == 200, response.text
    length = int(response.headers["inference-header-content-length"])
    header = json.loads(response.content[:length])
    offset = length
    for output in header["outputs"]:
        name = output["name"].removeprefix("out_")
        size = output["parameters"]["binary_data_size"]
        raw = response.content[offset : offset + size]
        offset += size
        assert raw == encode_raw(SAMPLES[name][1])[1]
    assert offset == len(response.content)


def test_binary_inputs_json_outputs_and_requested_outputs(client: Client) -> None:
    """Binary inputs can get JSON outputs; 'outputs' picks outputs and their binary flag."""
    body, header_length = binary_request(outputs_binary=False)
    header = json.loads(body[:header_length])
    header["outputs"] = [
        {"name": "out_int8"},
        {"name": "out_fp32", "parameters": {"binary_data": True}},
    ]
    new_header = json.dumps(header).encode()
    response = client.post(
        "/v2/models/toy/infer",
        content=new_header + body[header_length:],
        headers={"Inference-Header-Content-Length": str(len(new_header))},
    )
    assert response.status_code == 200, response.text
    length = int(response.headers["inference-header-content-length"])
    outputs = json.loads(response.content[:length])["outputs"]
    assert [o["name"] for o in outputs] == ["out_int8", "out_fp32"]
    assert outputs[0]["data"] == [-128, 127]
    assert response.content[length:] == np.array([0.25, 3.5], np.float32).tobytes()


def test_nested_and_flat_data_and_default_signature(client: Client) -> None:
    """data may be nested or flat; without signature_name the default signature runs."""
    for a_data in ([[1, 2], [3, 4]], [1, 2, 3, 4]):
        response = client.post(
            "/v2/models/toy/versions/1/infer",
            json={
                "inputs": [
                    {"name": "a", "datatype": "FP32", "shape": [2, 2], "data": a_data},
                    {"name": "b", "datatype": "INT32", "shape": [2], "data": [5, 6]},
                ]
            },
        )
        assert response.status_code == 200, response.text
        outputs = {o["name"]: o["data"] for o in response.json()["outputs"]}
        assert outputs == {"sum": [3.0, 7.0], "b_doubled": [10, 12]}


def test_non_finite_outputs_are_bare_tokens_in_json_data(client: Client) -> None:
    """NaN and ±Infinity in a JSON output's data are written as bare tokens, as TF Serving does."""
    response = client.post(
        "/v2/models/toy/infer",
        content=(
            b'{"id": "null", "inputs": [{"name": "x", "datatype": "FP32", "shape": [3], '
            b'"data": [NaN, Infinity, 1.5]}], "parameters": {"signature_name": "inline"}}'
        ),
    )
    assert response.status_code == 200, response.text
    assert b'"id":"null"' in response.content
    assert b'"data":[NaN,Infinity,3.0]' in response.content


def test_metadata_config_ready_and_health(client: Client) -> None:
    """Model metadata, Triton config, model and server readiness, and server metadata."""
    metadata = client.get("/v2/models/py_half_plus_two").json()
    assert metadata == {
        "name": "py_half_plus_two",
        "versions": ["1"],
        "platform": "python",
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1]}],
        "outputs": [{"name": "y", "datatype": "FP32", "shape": [-1]}],
    }
    config = client.get("/v2/models/py_half_plus_two/config").json()
    assert config["input"] == [{"name": "x", "data_type": "TYPE_FP32", "dims": [-1]}]
    assert client.get("/v2/models/py_half_plus_two/versions/1/ready").status_code == 200
    assert client.get("/v2/models/py_half_plus_two/versions/3/ready").status_code == 404
    assert client.get("/v2/health/live").status_code == 200
    assert client.get("/v2/health/ready").json() == {"ready": True}
    assert "binary_tensor_data" in client.get("/v2").json()["extensions"]
    assert client.get("/v2/models").json() == {
        "models": ["half_plus_two", "py_half_plus_two", "toy"]
    }


def test_repository_index(client: Client) -> None:
    """POST /v2/repository/index lists every version with Triton's state names."""
    index = client.post("/v2/repository/index", json={"ready": True}).json()
    assert {"name": "half_plus_two", "version": "1", "state": "READY", "reason": ""} in index
    assert {entry["name"] for entry in index} == {"half_plus_two", "py_half_plus_two", "toy"}


def _input(**overrides: object) -> dict[str, object]:
    return {"name": "x", "datatype": "FP32", "shape": [2], "data": [1, 2], **overrides}


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"inputs": [_input(datatype="FP8")]}, "Unknown V2 datatype 'FP8'"),
        ({"inputs": [_input(shape=[3])]}, "needs 3"),
        ({"inputs": [_input(shape=[-1])]}, "shape"),
        ({"inputs": [_input(name="z")]}, "Unknown input tensor 'z'"),
        ({"inputs": [_input(), _input()]}, "given twice"),
        ({"inputs": [_input(data=["a", "b"])]}, "strings"),
        ({"inputs": [_input(data=[[1], [2, 3]])]}, "rectangular"),
        ({"inputs": []}, "non-empty"),
        ({"inputs": [_input(datatype="FP64")]}, "dtype"),
        ({"inputs": [_input()], "outputs": [{"name": "nope"}]}, "nope"),
        ({"inputs": [_input(parameters={"binary_data_size": 8})]}, "binary data"),
        ({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1]}]}, "neither"),
        ({"inputs": [_input()], "parameters": {"signature_name": 3}}, "signature_name"),
    ],
)
def test_malformed_infer_requests(client: Client, body: object, fragment: str) -> None:
    """Each malformed V2 request is a 400 whose error names the problem."""
    response = client.post("/v2/models/py_half_plus_two/infer", json=body)
    assert response.status_code == 400, response.text
    assert fragment in response.json()["error"]


def test_malformed_binary_requests(client: Client) -> None:
    """Bad header lengths, short or surplus binary data, and broken BYTES are 400s."""
    header = json.dumps(
        {"inputs": [_input(data=None, parameters={"binary_data_size": 8})]}
    ).encode()
    data = struct.pack("<2f", 1, 2)
    cases = [
        (header + data, "x"),
        (header + data, str(len(header) + 100)),
        (header + data[:4], str(len(header))),
        (header + data + b"!", str(len(header))),
    ]
    for content, length in cases:
        response = client.post(
            "/v2/models/py_half_plus_two/infer",
            content=content,
            headers={"Inference-Header-Content-Length": length},
        )
        assert response.status_code == 400, (length, response.text)
    good = client.post(
        "/v2/models/py_half_plus_two/infer",
        content=header + data,
        headers={"Inference-Header-Content-Length": str(len(header))},
    )
    assert good.json()["outputs"][0]["data"] == [2.5, 3.0]


def test_unknown_models_and_paths_are_404(client: Client) -> None:
    """Unknown models, versions and V2 paths answer 404 with a JSON error."""
    for path in ("/v2/models/nope", "/v2/models/toy/versions/7", "/v2/nothing", "/elsewhere"):
        response = client.get(path)
        assert response.status_code == 404, path
        assert "error" in response.json()
    assert client.get("/v2/models/toy/versions/x").status_code == 400
