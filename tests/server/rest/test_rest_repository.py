"""The V2 repository extension over REST (index, load, unload) with tritonclient.http."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests
import tritonclient.http as triton
from tritonclient.utils import InferenceServerException

from servinglib import testing
from servinglib.server.config import ModelServerConfig
from servinglib.server.management.model_management import ModelManagement, ModelManagementOptions
from servinglib.server.rest import RestServer, create_app, create_server
from servinglib.server.server_core import ServerCore
from tests.server.grpc.grpc_servers import write_python_model
from tests.server.rest.conftest import CORE_OPTIONS


def _serve(core: ServerCore, options: ModelManagementOptions | None) -> tuple[RestServer, str]:
    management = ModelManagement(core, options) if options is not None else None
    app = create_app(core, management=management)
    server, port = create_server(app, "127.0.0.1", 0)
    server.start()
    return server, f"127.0.0.1:{port}"


@pytest.fixture
def managed(tmp_path: Path) -> Iterator[tuple[triton.InferenceServerClient, Path, str]]:
    """tritonclient.http of a server (model "a") with management on; the root; its address."""
    config = ModelServerConfig([write_python_model(tmp_path, "a")])
    options = ModelManagementOptions(enabled=True, allow_python_models=True)
    with ServerCore(config, CORE_OPTIONS) as core:
        server, address = _serve(core, options)
        client = triton.InferenceServerClient(address)
        try:
            yield client, tmp_path, address
        finally:
            client.close()
            server.stop()


def test_unload_load_and_add_through_tritonclient(
    managed: tuple[triton.InferenceServerClient, Path, str],
) -> None:
    """Unload takes a model out, load brings it back, a config parameter adds a new one."""
    client, root, _ = managed
    assert "model_repository" in client.get_server_metadata()["extensions"]
    assert client.get_model_repository_index() == [
        {"name": "a", "version": "1", "state": "READY", "reason": ""}
    ]
    client.unload_model("a")
    assert not client.is_model_ready("a")
    assert [(m["name"], m["state"]) for m in client.get_model_repository_index()] == [
        ("a", "UNAVAILABLE")
    ]
    client.load_model("a")
    assert client.is_model_ready("a")
    write_python_model(root, "b")
    client.load_model("b", config=json.dumps({"base_path": str(root / "b"), "platform": "python"}))
    assert client.is_model_ready("b")
    with pytest.raises(InferenceServerException, match="not in the repository"):
        client.load_model("c")


def test_a_model_directory_under_a_root_loads_by_name(
    managed: tuple[triton.InferenceServerClient, Path, str],
) -> None:
    """As KServe's model agent does: the model put in <root>/<name>, then load with body {}."""
    client, root, address = managed
    write_python_model(root, "agent_put")
    url = f"http://{address}/v2/repository/models/agent_put/load"
    answer = requests.post(
        url, data=b"{}", headers={"content-type": "application/json"}, timeout=60
    )
    assert (answer.status_code, answer.content) == (200, b"")
    assert client.is_model_ready("agent_put")


def test_bad_requests_are_400_and_outside_paths_403(
    managed: tuple[triton.InferenceServerClient, Path, str],
) -> None:
    """A body that is not JSON or has non-string parameters is 400; a path outside the roots 403."""
    _, root, address = managed
    url = f"http://{address}/v2/repository/models"
    answer = requests.post(f"{url}/a/load", data=b"{", timeout=30)
    assert answer.status_code == 400
    answer = requests.post(f"{url}/a/load", json={"parameters": {"config": 1}}, timeout=30)
    assert (answer.status_code, answer.json()) == (
        400,
        {"error": "Load parameter 'config' must be a string, got a number"},
    )
    outside = json.dumps({"base_path": "/etc", "platform": "python"})
    answer = requests.post(f"{url}/x/load", json={"parameters": {"config": outside}}, timeout=30)
    assert answer.status_code == 403
    assert "--model_management_roots" in answer.json()["error"]
    assert requests.post(f"{url}/nothere/unload", timeout=30).status_code == 404
    assert root.is_dir()


def test_load_and_unload_refused_while_management_is_off(tmp_path: Path) -> None:
    """Without the switch, REST load and unload answer 403 naming the flag and change nothing."""
    config = ModelServerConfig([write_python_model(tmp_path, "a")])
    with ServerCore(config, CORE_OPTIONS) as core:
        server, address = _serve(core, None)
        try:
            for verb in ("load", "unload"):
                answer = requests.post(
                    f"http://{address}/v2/repository/models/a/{verb}", timeout=30
                )
                assert answer.status_code == 403
                assert "--allow_remote_model_management" in answer.json()["error"]
            assert core.list_models() == ["a"]
            index = requests.post(f"http://{address}/v2/repository/index", timeout=30).json()
            assert index == [{"name": "a", "version": "1", "state": "READY", "reason": ""}]
        finally:
            server.stop()


def test_only_a_plain_name_is_looked_up_under_the_roots(tmp_path: Path) -> None:
    """Names that are not one path component (.., a/b) find no directory under the roots."""
    config = ModelServerConfig([write_python_model(tmp_path / "models", "a")])
    (tmp_path / "models" / "b" / "c").mkdir(parents=True)
    with ServerCore(config, CORE_OPTIONS) as core:
        management = ModelManagement(core, ModelManagementOptions(enabled=True))
        assert management.model_in_roots("a") == str(tmp_path / "models" / "a")
        for name in ("..", ".", "b/c", "", "missing"):
            assert management.model_in_roots(name) is None


def test_a_failed_load_leaves_readiness_as_it_was(
    managed: tuple[triton.InferenceServerClient, Path, str],
) -> None:
    """A load whose model fails answers its error; the model is unconfigured, the server ready."""
    _, root, address = managed
    broken = testing.write_python_model(root, "broken", "def (:\n")
    config = json.dumps({"base_path": str(broken), "platform": "python"})
    url = f"http://{address}/v2/repository/models/broken/load"
    answer = requests.post(url, json={"parameters": {"config": config}}, timeout=60)
    assert answer.status_code == 400
    assert "broken" in answer.json()["error"]
    assert requests.get(f"http://{address}/v2/health/ready", timeout=30).status_code == 200
    assert requests.get(f"http://{address}/v2/models/broken/ready", timeout=30).status_code == 404


def test_long_names_and_paths_are_answered_short(
    managed: tuple[triton.InferenceServerClient, Path, str],
) -> None:
    """A 60 KB model name or path, a NUL byte, deep JSON: client errors, bodies under 2 KB."""
    _, root, address = managed
    name = "n" * 60_000
    v2_input = {"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1.0]}]}
    answers = [
        requests.post(f"http://{address}/v2/models/{name}/infer", json=v2_input, timeout=60),
        requests.post(
            f"http://{address}/v1/models/{name}:predict", json={"instances": [1.0]}, timeout=60
        ),
        requests.post(f"http://{address}/v2/repository/models/{name}/load", timeout=60),
    ]
    assert [answer.status_code for answer in answers] == [404, 404, 404]
    for config in (
        json.dumps({"base_path": f"{root}/x\0", "platform": "tensorflow"}),
        json.dumps({"base_path": f"{root}/" + "p" * 100_000, "platform": "tensorflow"}),
        "[" * 100_000 + "]" * 100_000,
    ):
        url = f"http://{address}/v2/repository/models/x/load"
        answer = requests.post(url, json={"parameters": {"config": config}}, timeout=60)
        assert answer.status_code == 400
        answers.append(answer)
    assert max(len(answer.content) for answer in answers) <= 2100
