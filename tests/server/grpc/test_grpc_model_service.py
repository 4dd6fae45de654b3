"""ModelService through tensorflow-serving-api's stubs: status, and reloads adding and removing."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_servers import Served, serving, write_python_model
from tensorflow_serving.apis import (
    get_model_status_pb2,
    model_management_pb2,
    model_service_pb2_grpc,
)

from servinglib.server.config import ModelServerConfig
from servinglib.server.management.model_management import ModelManagementOptions
from servinglib.server.server_core import ServerCore
from servinglib.testing import wait_until
from servinglib.testing.plugin import TEST_SERVER_CORE_OPTIONS

AVAILABLE = get_model_status_pb2.ModelVersionStatus.State.AVAILABLE


def status(channel: grpc.Channel, name: str, version: int | None = None) -> list[tuple[int, int]]:
    """(version, state) of each version GetModelStatus reports."""
    request = get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = name
    if version is not None:
        request.model_spec.version.value = version
    response = model_service_pb2_grpc.ModelServiceStub(channel).GetModelStatus(request, timeout=30)
    return [(s.version, s.state) for s in response.model_version_status]


def test_get_model_status_lists_versions(channel: grpc.Channel) -> None:
    """GetModelStatus reports every served version of half_plus_two, newest first, with OK."""
    assert status(channel, "half_plus_two") == [(2, AVAILABLE), (1, AVAILABLE)]
    assert status(channel, "half_plus_two", 1) == [(1, AVAILABLE)]


@pytest.mark.parametrize(
    ("name", "version", "code"),
    [
        ("nope", None, grpc.StatusCode.NOT_FOUND),
        ("half_plus_two", 7, grpc.StatusCode.NOT_FOUND),
        ("", None, grpc.StatusCode.INVALID_ARGUMENT),
    ],
)
def test_get_model_status_errors(
    channel: grpc.Channel, name: str, version: int | None, code: grpc.StatusCode
) -> None:
    """Unknown models and versions are NOT_FOUND; a request without a name INVALID_ARGUMENT."""
    with pytest.raises(grpc.RpcError) as caught:
        status(channel, name, version)
    assert caught.value.code() == code


@pytest.fixture
def reloadable(tmp_path: Path, server_kind: str) -> Iterator[tuple[Served, Path]]:
    """A server over a core of its own (one Python model, "a"), and the models' root."""
    config = ModelServerConfig([write_python_model(tmp_path, "a")])
    enabled = ModelManagementOptions(enabled=True, allow_python_models=True)
    with (
        ServerCore(config, TEST_SERVER_CORE_OPTIONS) as core,
        serving(core, enabled, server=server_kind) as served,
    ):
        yield served, tmp_path


def reload(channel: grpc.Channel, text: str) -> model_management_pb2.ReloadConfigResponse:
    """HandleReloadConfigRequest with a models.config text, through the official classes."""
    from google.protobuf import text_format

    request = model_management_pb2.ReloadConfigRequest()
    text_format.Parse(text, request.config)
    return model_service_pb2_grpc.ModelServiceStub(channel).HandleReloadConfigRequest(
        request, timeout=60
    )


def model_entry(name: str, root: Path) -> str:
    """One model_config_list entry for a Python model under ``root``."""
    return f'config {{ name: "{name}" base_path: "{root / name}" model_platform: "python" }}'


def test_reload_adds_and_removes_models(reloadable: tuple[Served, Path]) -> None:
    """A reload adding b serves it; one without a unloads a; the status is OK each time."""
    served, root = reloadable
    write_python_model(root, "b")
    with served.channel() as channel:
        both = f"model_config_list {{ {model_entry('a', root)} {model_entry('b', root)} }}"
        response = reload(channel, both)
        assert response.status.error_code == 0
        assert status(channel, "b") == [(1, AVAILABLE)]
        response = reload(channel, f"model_config_list {{ {model_entry('b', root)} }}")
        assert response.status.error_code == 0
        # The reload waits for the models it adds; one it removes unloads after it returns.
        wait_until(lambda: all(state != AVAILABLE for _, state in status(channel, "a")))


def test_rejected_reload_keeps_the_old_config(reloadable: tuple[Served, Path]) -> None:
    """A config changing a's platform fails with its code and message; a keeps serving."""
    served, root = reloadable
    with served.channel() as channel:
        entry = model_entry("a", root).replace('"python"', '"tensorflow"')
        bad = f"model_config_list {{ {entry} }}"
        with pytest.raises(grpc.RpcError) as caught:
            reload(channel, bad)
        assert caught.value.code() in (
            grpc.StatusCode.INVALID_ARGUMENT,
            grpc.StatusCode.FAILED_PRECONDITION,
        )
        assert "model a" in caught.value.details()
        with pytest.raises(grpc.RpcError) as caught:
            reload(channel, "")
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert status(channel, "a") == [(1, AVAILABLE)]
