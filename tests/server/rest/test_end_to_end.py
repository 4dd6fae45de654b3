"""End to end on 127.0.0.1 with uvicorn: requests against TF Serving's API, tritonclient.http."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
import requests
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from servinglib.server.rest import RestApp, RestServer, create_server
from tests.server.rest.test_kserve_v2 import SAMPLES


@pytest.fixture(scope="module")
def server(app: RestApp) -> Iterator[RestServer]:
    """The session's app served by uvicorn on a free port of 127.0.0.1."""
    server, port = create_server(app, "127.0.0.1", 0)
    assert port == server.port > 0
    server.start()
    yield server
    server.stop()


@pytest.fixture
def triton_client(server: RestServer) -> Iterator[triton.InferenceServerClient]:
    """tritonclient's HTTP client of the server."""
    client = triton.InferenceServerClient(url=f"127.0.0.1:{server.port}")
    yield client
    client.close()


def test_tf_serving_api_with_requests(server: RestServer) -> None:
    """Status, metadata, predict, classify and regress answer as TF Serving's REST doc shows."""
    base = f"{server.url}/v1/models/half_plus_two"
    status = requests.get(base, timeout=30).json()
    assert {s["version"] for s in status["model_version_status"]} == {"1", "2"}
    metadata = requests.get(f"{base}/versions/1/metadata", timeout=30).json()
    assert metadata["model_spec"]["version"] == "1"
    predict = requests.post(
        f"{base}/versions/1:predict", json={"instances": [1.0, 2.0, 5.0]}, timeout=30
    )
    assert predict.json() == {"predictions": [2.5, 3.0, 4.5]}
    assert predict.headers["content-type"] == "application/json"
    columnar = requests.post(f"{base}/labels/stable:predict", json={"inputs": [1.0]}, timeout=30)
    assert columnar.json() == {"outputs": [3.5]}
    classify = requests.post(
        f"{base}/versions/2:classify",
        json={"signature_name": "classify_x_to_y", "examples": [{"x": 1.0}]},
        timeout=30,
    )
    assert classify.json() == {"results": [[["", 3.5]]]}
    regress = requests.post(
        f"{base}:regress",
        json={"signature_name": "regress_x_to_y", "examples": [{"x": 2.0}]},
        timeout=30,
    )
    assert regress.json() == {"results": [4.0]}


@pytest.mark.parametrize(
    "path",
    ["/v2/health/live", "/v2/health/ready", "/v2/models/half_plus_two", "/v1/models/half_plus_two"],
)
def test_head_answers_as_get_without_the_body(server: RestServer, path: str) -> None:
    """HEAD (curl -I) is answered with the GET's status and headers and no body (RFC 9110)."""
    with requests.Session() as session:  # one keep-alive connection for both
        get = session.get(f"{server.url}{path}", timeout=30)
        head = session.head(f"{server.url}{path}", timeout=30)
        assert session.get(f"{server.url}{path}", timeout=30).status_code == 200  # goes on
    assert (get.status_code, head.status_code) == (200, 200)
    assert head.content == b""
    assert head.headers["content-length"] == get.headers["content-length"] == str(len(get.content))
    assert head.headers["content-type"] == get.headers["content-type"]


def test_errors_over_the_wire_then_a_good_request(server: RestServer) -> None:
    """Errors come back as JSON with TF Serving's statuses; the server answers the next request."""
    missing = requests.post(
        f"{server.url}/v1/models/nope:predict", json={"instances": [1]}, timeout=30
    )
    assert missing.status_code == 404
    assert "nope" in missing.json()["error"]
    broken = requests.post(
        f"{server.url}/v1/models/half_plus_two:predict", data=b'{"instances": [1', timeout=30
    )
    assert broken.status_code == 400
    good = requests.post(
        f"{server.url}/v1/models/half_plus_two/versions/1:predict",
        json={"instances": [1.0]},
        timeout=30,
    )
    assert good.json() == {"predictions": [2.5]}


def test_tritonclient_health_and_metadata(triton_client: triton.InferenceServerClient) -> None:
    """is_server_live/ready, is_model_ready, get_model_metadata and get_model_config work."""
    assert triton_client.is_server_live()
    assert triton_client.is_server_ready()
    assert triton_client.is_model_ready("py_half_plus_two")
    assert triton_client.is_model_ready("half_plus_two", "1")
    assert not triton_client.is_model_ready("nope")
    metadata = triton_client.get_model_metadata("py_half_plus_two")
    assert metadata["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1]}]
    config = triton_client.get_model_config("py_half_plus_two")
    assert config["output"] == [{"name": "y", "data_type": "TYPE_FP32", "dims": [-1]}]
    assert triton_client.get_server_metadata()["name"] == "servinglib"


@pytest.mark.parametrize("binary_data", [True, False])
def test_tritonclient_infer(triton_client: triton.InferenceServerClient, binary_data: bool) -> None:
    """tritonclient's infer works with its default binary tensors and with JSON tensors."""
    x = np.array([1.0, 2.0, 5.0], np.float32)
    infer_input = triton.InferInput("x", [3], "FP32")
    infer_input.set_data_from_numpy(x, binary_data=binary_data)
    outputs = [triton.InferRequestedOutput("y", binary_data=binary_data)]
    result = triton_client.infer("py_half_plus_two", [infer_input], outputs=outputs, request_id="7")
    np.testing.assert_array_equal(result.as_numpy("y"), np.array([2.5, 3.0, 4.5], np.float32))
    assert result.get_response()["id"] == "7"
    default = triton_client.infer("py_half_plus_two", [infer_input])
    np.testing.assert_array_equal(default.as_numpy("y"), x * 0.5 + 2)


@pytest.mark.parametrize("binary_data", [True, False])
def test_tritonclient_every_datatype(
    triton_client: triton.InferenceServerClient, binary_data: bool
) -> None:
    """Every V2 datatype comes back equal through tritonclient, as binary data or as JSON."""
    inputs = []
    for name, (datatype, array) in SAMPLES.items():
        infer_input = triton.InferInput(name, list(array.shape), datatype)
        # tritonclient sends and reads BF16 only as binary data.
        infer_input.set_data_from_numpy(array, binary_data=binary_data or datatype == "BF16")
        inputs.append(infer_input)
    outputs = [
        triton.InferRequestedOutput(f"out_{name}", binary_data=binary_data or name == "bf16")
        for name in SAMPLES
    ]
    result = triton_client.infer(
        "toy", inputs, outputs=outputs, parameters={"signature_name": "all_types"}
    )
    for name, (datatype, array) in SAMPLES.items():
        got = result.as_numpy(f"out_{name}")
        if datatype == "BF16":
            np.testing.assert_array_equal(got.astype(np.float32), array.astype(np.float32))
        elif datatype == "BYTES" and not binary_data:  # tritonclient gives JSON strings as str
            assert got.tolist() == [[item.decode() for item in row] for row in array]
        else:
            np.testing.assert_array_equal(got, array)


def test_tritonclient_sees_errors(triton_client: triton.InferenceServerClient) -> None:
    """A bad request raises InferenceServerException carrying the server's message."""
    infer_input = triton.InferInput("z", [1], "FP32")
    infer_input.set_data_from_numpy(np.array([1.0], np.float32))
    with pytest.raises(InferenceServerException, match="Unknown input tensor 'z'"):
        triton_client.infer("py_half_plus_two", [infer_input])


def test_server_stops_and_frees_its_port(app: RestApp) -> None:
    """stop() ends serving: the port refuses connections afterwards."""
    server, port = create_server(app)
    server.start()
    assert requests.get(f"{server.url}/v2/health/live", timeout=30).status_code == 200
    server.stop()
    with pytest.raises(requests.ConnectionError):
        requests.get(f"http://127.0.0.1:{port}/v2/health/live", timeout=30)
