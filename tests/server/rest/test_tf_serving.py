"""TF Serving's REST API in process: the request and response shapes of TF Serving's REST doc."""

from __future__ import annotations

import base64
import logging

import pytest

from tests.server.rest.conftest import Client


def test_model_status(client: Client) -> None:
    """GET /v1/models/{m} lists every version, newest first, with TF Serving's status object."""
    response = client.get("/v1/models/half_plus_two")
    assert response.status_code == 200
    assert response.json() == {
        "model_version_status": [
            {
                "version": v,
                "state": "AVAILABLE",
                "status": {"error_code": "OK", "error_message": ""},
            }
            for v in ("2", "1")
        ]
    }
    one = client.get("/v1/models/half_plus_two/versions/1").json()
    assert [s["version"] for s in one["model_version_status"]] == ["1"]
    labelled = client.get("/v1/models/half_plus_two/labels/canary").json()
    assert [s["version"] for s in labelled["model_version_status"]] == ["1"]


def test_model_metadata(client: Client) -> None:
    """GET …/metadata answers the model spec and the SignatureDefMap as TF Serving writes it."""
    body = client.get("/v1/models/half_plus_two/versions/1/metadata").json()
    assert body["model_spec"] == {"name": "half_plus_two", "signature_name": "", "version": "1"}
    signatures = body["metadata"]["signature_def"]["signature_def"]
    assert set(signatures) == {
        "serving_default",
        "classify_x_to_y",
        "regress_x_to_y",
        "regress_x_to_y2",
    }
    default = signatures["serving_default"]
    assert default["method_name"] == "tensorflow/serving/predict"
    assert default["inputs"]["x"]["dtype"] == "DT_FLOAT"
    assert default["inputs"]["x"]["tensor_shape"]["dim"] == [{"size": "-1", "name": ""}]
    assert signatures["classify_x_to_y"]["method_name"] == "tensorflow/serving/classify"


def test_predict_row_format_as_in_the_doc(client: Client) -> None:
    """The doc's half_plus_two example: instances [1, 2, 5] → predictions [2.5, 3.0, 4.5]."""
    response = client.post(
        "/v1/models/half_plus_two/versions/1:predict", json={"instances": [1.0, 2.0, 5.0]}
    )
    assert response.status_code == 200
    assert response.json() == {"predictions": [2.5, 3.0, 4.5]}


def test_predict_columnar_format_latest_and_label(client: Client) -> None:
    """Columnar inputs give outputs; no version means the latest, a label its version."""
    latest = client.post("/v1/models/half_plus_two:predict", json={"inputs": [1.0, 2.0]})
    assert latest.json() == {"outputs": [3.5, 4.0]}
    stable = client.post(
        "/v1/models/half_plus_two/labels/canary:predict",
        json={"signature_name": "serving_default", "inputs": {"x": [1.0]}},
    )
    assert stable.json() == {"outputs": [2.5]}


def test_paths_are_case_insensitive_and_url_decoded(client: Client) -> None:
    """TF Serving matches paths without case and URL-decodes model names."""
    response = client.post(
        "/V1/MODELS/half%5Fplus%5Ftwo/VERSIONS/1:PREDICT", json={"instances": [1]}
    )
    assert response.json() == {"predictions": [2.5]}


def test_named_inputs_and_outputs_in_both_formats(client: Client) -> None:
    """Several inputs and outputs: objects per instance in rows, one object of columns."""
    rows = client.post(
        "/v1/models/toy:predict",
        json={"instances": [{"a": [1, 2], "b": 1}, {"a": [3, 4.5], "b": 2}]},
    )
    assert rows.json() == {
        "predictions": [{"sum": 3.0, "b_doubled": 2}, {"sum": 7.5, "b_doubled": 4}]
    }
    columns = client.post(
        "/v1/models/toy:predict", json={"inputs": {"a": [[1, 2], [3, 4.5]], "b": [1, 2]}}
    )
    assert columns.json() == {"outputs": {"sum": [3.0, 7.5], "b_doubled": [2, 4]}}


def test_b64_strings_in_and_out(client: Client) -> None:
    """{"b64": …} decodes to bytes; outputs named *_bytes, and non-UTF-8 strings, go out as b64."""
    raw = b"\xff\x00binary"
    encoded = base64.b64encode(raw).decode()
    response = client.post(
        "/v1/models/toy:predict",
        json={"signature_name": "strings", "instances": [{"b64": encoded}, "héllo"]},
    )
    assert response.status_code == 200
    hello = base64.b64encode("héllo".encode()).decode()
    assert response.json() == {
        "predictions": [
            {"text": {"b64": encoded}, "text_bytes": {"b64": encoded}},
            {"text": "héllo", "text_bytes": {"b64": hello}},
        ]
    }


def test_nan_and_infinity_round_trip_as_bare_tokens(client: Client) -> None:
    """NaN and ±Infinity are read and written as TF Serving does: bare JSON tokens."""
    response = client.post(
        "/v1/models/toy:predict",
        content=b'{"signature_name": "inline", "instances": [NaN, Infinity, -Infinity, 1.5]}',
    )
    assert response.status_code == 200
    assert response.content == b'{"predictions":[NaN,Infinity,-Infinity,3.0]}'


def test_non_finite_values_of_several_outputs_are_bare_tokens_in_rows(client: Client) -> None:
    """Row responses of several outputs write a NaN of one output as a bare token too."""
    response = client.post(
        "/v1/models/toy:predict",
        content=b'{"instances": [{"a": [NaN, 1.0], "b": 1}, {"a": [1.0, 2.0], "b": 2}]}',
    )
    assert response.status_code == 200
    assert response.content == (
        b'{"predictions":[{"sum":NaN,"b_doubled":2},{"sum":3.0,"b_doubled":4}]}'
    )


def test_scalar_output_needs_the_columnar_format(client: Client) -> None:
    """A scalar output is written in columnar responses and refused (400) in row responses."""
    columns = client.post(
        "/v1/models/toy:predict", json={"signature_name": "scalar", "inputs": [1, 2]}
    )
    assert columns.json() == {"outputs": 3.0}
    rows = client.post(
        "/v1/models/toy:predict", json={"signature_name": "scalar", "instances": [1]}
    )
    assert rows.status_code == 400
    assert "batch dimension" in rows.json()["error"]


def test_classify_and_regress_as_in_the_doc(client: Client) -> None:
    """classify gives [label, score] pairs ("" without classes); regress one value each."""
    classify = client.post(
        "/v1/models/half_plus_two/versions/1:classify",
        json={"signature_name": "classify_x_to_y", "examples": [{"x": 1.0}, {"x": 2.0}]},
    )
    assert classify.json() == {"results": [[["", 2.5]], [["", 3.0]]]}
    regress = client.post(
        "/v1/models/half_plus_two/versions/1:regress",
        json={
            "signature_name": "regress_x_to_y",
            "context": {"x": 4.0},
            "examples": [{"x": 1.0}, {}],
        },
    )
    assert regress.json() == {"results": [2.5, 4.0]}
    labels = client.post(
        "/v1/models/toy:classify", json={"signature_name": "classify_labels", "examples": [{}]}
    )
    assert labels.json() == {"results": [[["cat", 0.25], ["dog", 0.75]]]}


def test_regress_writes_a_nan_result_as_a_bare_token(client: Client) -> None:
    """A regression result of NaN is written as TF Serving writes it: the bare token NaN."""
    response = client.post(
        "/v1/models/half_plus_two/versions/1:regress",
        content=b'{"signature_name": "regress_x_to_y", "examples": [{"x": NaN}, {"x": 2.0}]}',
    )
    assert response.status_code == 200, response.text
    assert response.content == b'{"results":[NaN,3.0]}'


def test_classify_rejects_a_predict_signature(client: Client) -> None:
    """Classify on a predict signature is a 400 naming the expected method."""
    response = client.post("/v1/models/half_plus_two:classify", json={"examples": [{"x": 1.0}]})
    assert response.status_code == 400
    assert "tensorflow/serving/classify" in response.json()["error"]


@pytest.mark.parametrize(
    ("path", "status", "fragment"),
    [
        ("/v1/models/nope:predict", 404, "nope"),
        ("/v1/models/half_plus_two/versions/9:predict", 404, "9"),
        ("/v1/models/half_plus_two/labels/nope:predict", 400, "nope"),
        ("/v1/models/..%2F..%2Fetc%2Fpasswd:predict", 404, "../../etc/passwd"),
        ("/v1/models/half_plus_two/versions/x:predict", 400, "Malformed request"),
    ],
)
def test_unknown_model_version_or_label(
    client: Client, path: str, status: int, fragment: str
) -> None:
    """Unknown models and versions are 404, labels 400 (TF Serving's INVALID_ARGUMENT); names are
    looked up, never opened as paths."""
    response = client.post(path, json={"instances": [1.0]})
    assert response.status_code == status
    assert fragment in response.json()["error"]


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"instances": [1.0], "inputs": [1.0]}, "only one of 'inputs' or 'instances'"),
        ({"signature_name": "serving_default"}, "Missing 'inputs' or 'instances'"),
        ({"instances": "x"}, "list"),
        ({"instances": []}, "No values"),
        ({"instances": ["a"]}, "strings"),
        ({"instances": [[1.0], 2.0]}, "rectangular"),
        ({"inputs": {"x": [1.0], "z": [2.0]}}, "Unknown input tensor 'z'"),
        ({"inputs": {"y": [1.0]}}, "Unknown input tensor 'y'"),
        ({"signature_name": 5, "inputs": [1.0]}, "signature_name"),
        ({"signature_name": "nope", "inputs": [1.0]}, "nope"),
        ({"inputs": [[1.0]]}, "shape"),
        ({"inputs": [1e300]}, "out of the range of float32"),
    ],
)
def test_malformed_predict_requests(client: Client, body: object, fragment: str) -> None:
    """Each malformed predict body is a 400 whose error names the problem."""
    response = client.post("/v1/models/half_plus_two:predict", json=body)
    assert response.status_code == 400, response.text
    assert fragment in response.json()["error"]


def test_multi_input_mistakes(client: Client) -> None:
    """Row objects must carry every input; plain lists need a single-input signature."""
    plain = client.post("/v1/models/toy:predict", json={"instances": [1.0]})
    assert plain.status_code == 400
    assert "several inputs" in plain.json()["error"]
    partial = client.post("/v1/models/toy:predict", json={"instances": [{"a": [1, 2]}]})
    assert partial.status_code == 400
    assert "exactly the keys" in partial.json()["error"]
    fraction = client.post("/v1/models/toy:predict", json={"inputs": {"a": [[1, 2]], "b": [1.5]}})
    assert fraction.status_code == 400
    assert "Input 'b'" in fraction.json()["error"]


def test_model_error_is_500_and_logged_once(
    client: Client, caplog: pytest.LogCaptureFixture
) -> None:
    """A model that raises gives 500 with its message, logged once under the request id."""
    with caplog.at_level(logging.ERROR, logger="servinglib.server.rest"):
        response = client.post(
            "/v1/models/toy:predict",
            json={"signature_name": "fails", "inputs": [1.0]},
            headers={"x-request-id": "req-42"},
        )
    assert response.status_code == 500
    assert "model exploded" in response.json()["error"]
    assert response.headers["x-request-id"] == "req-42"
    records = [r for r in caplog.records if "req-42" in r.getMessage()]
    assert len(records) == 1
    assert client.post(
        "/v1/models/toy:predict", json={"signature_name": "inline", "inputs": [1]}
    ).json() == {"outputs": [2.0]}


def test_model_listing(client: Client) -> None:
    """GET /v1/models lists every configured model with its version status."""
    models = client.get("/v1/models").json()["models"]
    assert [m["name"] for m in models] == ["half_plus_two", "py_half_plus_two", "toy"]
    assert models[2]["model_version_status"][0]["state"] == "AVAILABLE"
