"""servinglib-server --model_repository: a Triton model repository served by the real CLI,
its model control modes, and the config answers, through tritonclient's HTTP and gRPC clients."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http
from tritonclient.utils import InferenceServerException

from servinglib.codecs.model_config_json import model_config_json
from servinglib.examples import HALF_PLUS_TWO
from servinglib.server.triton_repository import TritonRepository
from servinglib.testing import wait_until
from tests.server.cli.test_model_server import CONFIG, Server, python_model
from tests.server.triton_models import ADD_SUB, ALL_VERSIONS, BATCHED, GPU, UNBATCHED, write_model

PYTHON = "--allow_python_code_execution"


@pytest.fixture
def repository(tmp_path: Path) -> Path:
    """add_sub, batched (dynamic batching) and every (versions 1 and 2, all served)."""
    repo = tmp_path / "repo"
    write_model(repo, "add_sub", ADD_SUB)
    write_model(repo, "batched", BATCHED)
    write_model(repo, "every", ALL_VERSIONS, versions=(1, 2))
    return repo


class Clients:
    """One tritonclient of each protocol, shared by every call, on a started server."""

    def __init__(self, server: Server) -> None:
        self.http = triton_http.InferenceServerClient(
            f"127.0.0.1:{server.rest_port}", concurrency=8
        )
        self.grpc = triton_grpc.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")

    def each(self) -> list[Any]:
        return [self.http, self.grpc]

    def close(self) -> None:
        self.http.close()
        self.grpc.close()


Serve = Callable[..., tuple[Server, Clients]]


@pytest.fixture
def serve(repository: Path) -> Iterator[Serve]:
    """Starts the server on the repository with the flags given, and clients; stops them after."""
    started: list[tuple[Server, Clients]] = []

    def start(*flags: str) -> tuple[Server, Clients]:
        server = Server(f"--model_repository={repository}", PYTHON, *flags)
        clients = Clients(server)
        started.append((server, clients))
        server.wait_ready()
        return server, clients

    yield start
    for server, clients in started:
        clients.close()
        server.close()


def _infer(client: Any, model: str, a: np.ndarray, b: np.ndarray, version: str = "") -> Any:
    module = triton_grpc if isinstance(client, triton_grpc.InferenceServerClient) else triton_http
    inputs = [module.InferInput(n, list(a.shape), "FP32") for n in ("INPUT0", "INPUT1")]
    inputs[0].set_data_from_numpy(a)
    inputs[1].set_data_from_numpy(b)
    return client.infer(model, inputs, model_version=version)


def _status(error: InferenceServerException) -> str:
    return str(error.status())


def test_every_model_of_the_repository_serves_over_both_protocols(
    serve: Serve, repository: Path
) -> None:
    """add_sub, batched and both versions of every answer tritonclient's HTTP and gRPC calls."""
    _, clients = serve()
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.ones((2, 4), dtype=np.float32)
    for client in clients.each():
        for model in ("add_sub", "batched"):
            assert client.is_model_ready(model)
            result = _infer(client, model, a, b)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), a + b)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), a - b)
        for version in ("1", "2"):
            result = _infer(client, "every", a, b, version)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), (a + b) * int(version))


def test_the_config_answers_are_the_completed_config_pbtxt_on_both_protocols(
    serve: Serve, repository: Path
) -> None:
    """GET /v2/models/m/config and gRPC ModelConfig answer the config.pbtxt as completed."""
    _, clients = serve()
    for name in ("add_sub", "batched", "every"):
        completed = TritonRepository(repository).model(name).triton_config
        assert completed is not None
        expected = model_config_json(completed.message)
        over_http = clients.http.get_model_config(name)
        over_grpc = clients.grpc.get_model_config(name, as_json=True)["config"]
        assert over_http == expected
        assert _as_http(over_grpc) == expected


def _as_http(fields: dict[str, Any]) -> dict[str, Any]:
    """tritonclient's gRPC JSON (protobuf's: 64-bit integers as text, defaults left out) as
    Triton's HTTP JSON, by way of the message."""
    from google.protobuf import json_format

    from servinglib.protos import model_config_pb2

    return model_config_json(json_format.ParseDict(fields, model_config_pb2.ModelConfig()))


def test_dynamic_batching_merges_concurrent_requests(serve: Serve) -> None:
    """Requests of batched arriving together run in fewer executions than requests."""
    _, clients = serve()
    a = np.ones((1, 4), dtype=np.float32)
    inputs = [triton_http.InferInput(n, [1, 4], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    pending = [clients.http.async_infer("batched", inputs) for _ in range(16)]  # 8 at once
    for request in pending:
        np.testing.assert_array_equal(request.get_result().as_numpy("OUTPUT0"), a + a)
    stats = clients.http.get_inference_statistics("batched")["model_stats"][0]
    assert stats["inference_count"] == 16
    assert stats["execution_count"] < 16


def test_unimplemented_fields_are_warned_about_once(repository: Path) -> None:
    """batched's preserve_ordering is named in one warning line of the server's log."""
    server = Server(f"--model_repository={repository}", PYTHON)
    try:
        server.wait_ready()
    finally:
        server.close()
    lines = [line for line in server.output().splitlines() if "preserve_ordering" in line]
    assert len(lines) == 1, server.output()
    assert "Model batched" in lines[0]


def test_none_mode_refuses_loads_and_unloads(
    serve: Serve,
) -> None:
    """Load and unload answer 503 / UNAVAILABLE, as Triton's do; the models serve on."""
    _, clients = serve("--model_control_mode=none")
    for client, code in ((clients.http, "503"), (clients.grpc, "StatusCode.UNAVAILABLE")):
        for call in (client.load_model, client.unload_model):
            with pytest.raises(InferenceServerException) as caught:
                call("add_sub")
            assert _status(caught.value) == code
            assert "not allowed if polling is enabled" in caught.value.message()
        assert client.is_model_ready("add_sub")


def test_explicit_mode_loads_unloads_and_reloads_over_both_protocols(
    serve: Serve, repository: Path
) -> None:
    """Only --load_model's model serves at start; load, unload and reload work over both."""
    _, clients = serve("--model_control_mode=explicit", "--load_model=add_sub")
    http, grpc = clients.http, clients.grpc
    assert http.is_model_ready("add_sub")
    assert not http.is_model_ready("batched")
    index = {entry["name"]: entry for entry in http.get_model_repository_index()}
    assert index["batched"] == {"name": "batched"}  # never served: named alone, as by Triton
    http.load_model("batched")
    assert grpc.is_model_ready("batched")
    grpc.unload_model("batched")
    wait_until(lambda: not http.is_model_ready("batched"))
    grpc.load_model("every")
    assert http.is_model_ready("every", "2")

    write_model(repository, "add_sub", UNBATCHED)  # whole [4] tensors from now on
    grpc.load_model("add_sub")
    assert http.get_model_config("add_sub")["max_batch_size"] == 0
    a = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(_infer(http, "add_sub", a, a).as_numpy("OUTPUT0"), a + a)

    for client, code in ((http, "400"), (grpc, "StatusCode.NOT_FOUND")):
        with pytest.raises(InferenceServerException) as caught:
            client.load_model("absent")
        assert _status(caught.value) in {code, "404"}


def test_explicit_mode_with_no_model_loaded_is_ready_and_loads_when_asked(serve: Serve) -> None:
    """Explicit mode without --load_model is ready at once, as Triton is, and loads on request."""
    _, clients = serve("--model_control_mode=explicit")
    assert clients.http.is_server_ready()
    assert clients.grpc.is_server_ready()
    clients.grpc.load_model("add_sub")
    assert clients.http.is_model_ready("add_sub")


def test_poll_mode_follows_the_repository(serve: Serve, repository: Path) -> None:
    """A model directory added is loaded, one removed unloaded; load calls are refused."""
    _, clients = serve("--model_control_mode=poll", "--repository_poll_secs=0.2")
    write_model(repository, "late", ADD_SUB)
    wait_until(lambda: _ready(clients.http, "late"), timeout_s=60)
    shutil.rmtree(repository / "batched")
    wait_until(lambda: not _ready(clients.http, "batched"), timeout_s=60)
    with pytest.raises(InferenceServerException) as caught:
        clients.grpc.load_model("late")
    assert _status(caught.value) == "StatusCode.UNAVAILABLE"


def _ready(client: Any, model: str) -> bool:
    try:
        return bool(client.is_model_ready(model))
    except InferenceServerException:
        return False


def test_a_gpu_model_fails_with_one_line_while_the_others_serve(repository: Path) -> None:
    """With --start_degraded a KIND_GPU model is one log line and listed unserved in the index;
    without it the start fails naming it."""
    write_model(repository, "gpu", GPU)
    server = Server(f"--model_repository={repository}", PYTHON, "--start_degraded")
    try:
        server.wait_ready()
        client = triton_http.InferenceServerClient(f"127.0.0.1:{server.rest_port}")
        try:
            assert client.is_model_ready("add_sub")
            index = {e["name"]: e for e in client.get_model_repository_index()}
            assert index["gpu"] == {"name": "gpu"}
        finally:
            client.close()
    finally:
        server.close()
    lines = [line for line in server.output().splitlines() if "asks for a GPU" in line]
    assert len(lines) == 1, server.output()

    failed = Server(f"--model_repository={repository}", PYTHON)
    assert failed.process.wait(timeout=60) == 1
    assert "gpu" in failed.output()
    failed.close()


def test_a_model_config_file_and_a_repository_serve_together(
    tmp_path: Path, repository: Path
) -> None:
    """The models of --model_config_file serve beside the repository's; a name in both fails
    the start naming it."""
    config = tmp_path / "models.config"
    config.write_text(CONFIG % ("triple", python_model(tmp_path, "triple", 3)))
    server = Server(f"--model_config_file={config}", f"--model_repository={repository}", PYTHON)
    try:
        server.wait_ready()
        assert server.predict("triple", [1.0]).json() == {"predictions": [3.0]}
        assert server.http.get("/v2/models/add_sub/ready").status_code == 200
    finally:
        server.close()

    config.write_text(CONFIG % ("add_sub", python_model(tmp_path, "add_sub", 3)))
    clash = Server(f"--model_config_file={config}", f"--model_repository={repository}", PYTHON)
    assert clash.process.wait(timeout=60) == 1
    assert "Model add_sub is both" in clash.output()
    clash.close()


def test_a_savedmodel_in_triton_s_layout_is_served(tmp_path: Path) -> None:
    """<version>/model.savedmodel (no config.pbtxt: auto-completed) is loaded by the tensorflow
    platform from there, and answers V2 inference."""
    version = tmp_path / "repo" / "half_plus_two" / "1"
    version.mkdir(parents=True)
    shutil.copytree(Path(HALF_PLUS_TWO) / "1", version / "model.savedmodel")
    server = Server(f"--model_repository={tmp_path / 'repo'}")
    try:
        server.wait_ready()
        client = triton_http.InferenceServerClient(f"127.0.0.1:{server.rest_port}")
        try:
            x = triton_http.InferInput("x", [3], "FP32")
            x.set_data_from_numpy(np.array([1.0, 2.0, 3.0], dtype=np.float32))
            result = client.infer("half_plus_two", [x])
            np.testing.assert_array_equal(result.as_numpy("y"), [2.5, 3.0, 3.5])
            assert client.get_model_config("half_plus_two")["platform"] == "tensorflow_savedmodel"
        finally:
            client.close()
    finally:
        server.close()


def test_a_config_file_reload_keeps_the_repository_s_models(
    tmp_path: Path, repository: Path
) -> None:
    """An edit of --model_config_file adds its model; the repository's models serve on."""
    config = tmp_path / "models.config"
    config.write_text(CONFIG % ("triple", python_model(tmp_path, "triple", 3)))
    server = Server(
        f"--model_config_file={config}",
        "--model_config_file_poll_wait_seconds=0.2",
        f"--model_repository={repository}",
        PYTHON,
    )
    try:
        server.wait_ready()
        config.write_text(CONFIG % ("double", python_model(tmp_path, "double", 2)))
        wait_until(lambda: server.http_ok("/v2/models/double/ready"), timeout_s=60)
        assert not server.http_ok("/v2/models/triple/ready")
        assert server.http_ok("/v2/models/add_sub/ready")
    finally:
        server.close()


def test_a_reload_returns_once_the_new_config_serves(serve: Serve, repository: Path) -> None:
    """Loading a served model whose config changed unloads the old one first and returns only
    once the new one serves: the old version's slow finalize (0.5 s) must not leave a
    window in which the load has returned and the model is not served."""
    model = repository / "add_sub"
    model_py = model / "1" / "model.py"
    model_py.write_text(
        model_py.read_text() + "\nimport time\n\n"
        "def _slow_finalize(self):\n    time.sleep(0.5)\n\n"
        "if pb_utils is not None:\n    TritonPythonModel.finalize = _slow_finalize\n",
        encoding="utf-8",
    )
    _, clients = serve("--model_control_mode=explicit", "--load_model=add_sub")
    assert clients.http.is_model_ready("add_sub")
    for round_ in range(3):
        config = (model / "config.pbtxt").read_text()
        (model / "config.pbtxt").write_text(
            config + f'parameters {{ key: "round" value: {{ string_value: "{round_}" }} }}\n'
        )
        clients.grpc.load_model("add_sub")
        assert clients.http.is_model_ready("add_sub")
        parameters = clients.http.get_model_config("add_sub")["parameters"]
        assert parameters["round"] == {"string_value": str(round_)}
