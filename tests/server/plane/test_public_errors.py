"""PublicErrors: what a client reads of an error names no directory of the server's."""

from __future__ import annotations

from pathlib import Path

import grpc
import pytest
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from servinglib.errors import NotFoundError, UnavailableError
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.plane.public_errors import PublicErrors
from servinglib.server.server_core_options import ServerCoreOptions
from servinglib.sources.file_system_storage_path_source import FileSystemStoragePathSourceConfig
from servinglib.testing import wait_until, write_python_model
from tests.server.cli.test_model_server import Server

BROKEN_MODEL_PY = """
from servinglib.loaders import PythonModel

class Model(PythonModel):
    def load(self, path):
        raise RuntimeError(f"cannot read {path}/weights.bin")
"""


def test_base_paths_and_the_cache_become_labels(tmp_path: Path) -> None:
    """A model's base path is written <name>, the model cache <model cache>; other text stays."""
    base = tmp_path / "models" / "hpt"
    cache = tmp_path / "cache"
    config = ModelServerConfig([ModelConfig.python("hpt", str(base))])
    options = ServerCoreOptions(
        source=FileSystemStoragePathSourceConfig(model_cache_dir=str(cache))
    )
    public = PublicErrors(_Core(config, options))  # type: ignore[arg-type]
    error = UnavailableError(f"The model process 5310 ({base}/2) exited with status -9")
    assert public.error(error).message == "The model process 5310 (<hpt>/2) exited with status -9"
    assert public.error(error).__cause__ is error
    assert (
        public.text(f"'{cache}/abc/1/model.py' missing") == "'<model cache>/abc/1/model.py' missing"
    )
    assert public.text("POST /v1/models/x:predict and s3://bucket/m") == (
        "POST /v1/models/x:predict and s3://bucket/m"
    )
    kept = NotFoundError("Servable not found for request: Latest(x)")
    assert public.error(kept) is kept
    shown = PublicErrors(_Core(config, options), show_paths=True)  # type: ignore[arg-type]
    assert shown.error(error) is error


class _Core:
    """What PublicErrors reads of a ServerCore: its config and options."""

    def __init__(self, config: ModelServerConfig, options: ServerCoreOptions) -> None:
        self.config = config
        self.options = options


def test_a_failed_load_reaches_clients_without_the_servers_paths(tmp_path: Path) -> None:
    """A version whose load failed naming its files: REST status and predict, and gRPC
    Predict, say <name>/1/...; the server's log has the full path; --show_paths_in_errors
    shows it to clients too."""
    version = write_python_model(tmp_path, "broken", BROKEN_MODEL_PY) / "1"
    config = tmp_path / "models.config"
    config.write_text(
        "model_config_list { config { name: 'broken' base_path: '%s' model_platform: 'python' } }"
        % (tmp_path / "broken")
    )
    for show in (False, True):
        server = Server(
            f"--model_config_file={config}",
            "--allow_python_code_execution",
            "--start_degraded",
            "--max_num_load_retries=0",
            *(["--show_paths_in_errors"] if show else []),
        )
        try:
            wait_until(lambda s=server: s.http_ok("/v2/health/live"), timeout_s=60)
            wait_until(
                lambda s=server: "weights.bin" in s.http.get("/v1/models/broken").text,
                timeout_s=60,
            )
            status = server.http.get("/v1/models/broken").json()
            message = status["model_version_status"][0]["status"]["error_message"]
            predicted = server.http.post("/v1/models/broken:predict", json={"instances": [1]})
            request = predict_pb2.PredictRequest()
            request.model_spec.name = "broken"
            stub = prediction_service_pb2_grpc.PredictionServiceStub(server.channel)
            with pytest.raises(grpc.RpcError) as failed:
                stub.Predict(request, timeout=30)
            answers = [message, predicted.text, failed.value.details()]
            if show:
                assert all(f"{version}/weights.bin" in answer for answer in answers), answers
            else:
                assert all("<broken>/1/weights.bin" in answer for answer in answers), answers
                assert not any(str(tmp_path) in answer for answer in answers), answers
        finally:
            server.close()
        assert f"{version}/weights.bin" in server.output()
