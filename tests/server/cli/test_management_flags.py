"""The management flags of servinglib-server: parsed, checked, and wired to the gRPC server."""

from __future__ import annotations

from pathlib import Path

import pytest
import tritonclient.grpc as triton
from tritonclient.utils import InferenceServerException

from servinglib.server.cli import FlagError, parse_flags
from servinglib.server.cli.model_server import management_options
from servinglib.server.management.model_management import ModelManagementOptions
from servinglib.testing import wait_until
from tests.server.cli.test_model_server import CONFIG, Server, python_model


def test_management_flags_parse_into_options() -> None:
    """The three flags become ModelManagementOptions; the default is off."""
    assert management_options(parse_flags(["--model_base_path=/m"], {})) == (
        ModelManagementOptions()
    )
    flags = parse_flags(
        [
            "--model_base_path=/m",
            "--allow_remote_model_management",
            "--model_management_roots=/models,/srv",
            "--allow_remote_python_models=true",
        ],
        {},
    )
    assert management_options(flags) == ModelManagementOptions(
        enabled=True, allowed_roots=("/models", "/srv"), allow_python_models=True
    )


@pytest.mark.parametrize(
    "flag", ["--model_management_roots=/models", "--allow_remote_python_models"]
)
def test_management_details_need_the_switch(flag: str) -> None:
    """Roots or the python allowance without --allow_remote_model_management are refused."""
    with pytest.raises(FlagError, match="need --allow_remote_model_management"):
        parse_flags(["--model_base_path=/m", flag], {})


@pytest.mark.parametrize("enabled", [False, True])
def test_the_server_refuses_unloads_unless_allowed(tmp_path: Path, enabled: bool) -> None:
    """A real server answers RepositoryModelUnload PERMISSION_DENIED, or unloads with the flag."""
    config = tmp_path / "models.config"
    config.write_text(CONFIG % ("triple", python_model(tmp_path, "triple", 3)))
    switch = ["--allow_remote_model_management"] if enabled else []
    server = Server(f"--model_config_file={config}", "--allow_python_code_execution", *switch)
    try:
        server.wait_ready()
        client = triton.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
        try:
            if enabled:
                client.unload_model("triple", client_timeout=60)
                assert not server.ready()  # at once: no model is configured any more
                wait_until(lambda: not client.is_model_ready("triple"), timeout_s=60)
            else:
                with pytest.raises(InferenceServerException) as caught:
                    client.unload_model("triple", client_timeout=60)
                assert caught.value.status() == "StatusCode.PERMISSION_DENIED"
                assert client.is_model_ready("triple")
        finally:
            client.close()
    finally:
        server.close()
