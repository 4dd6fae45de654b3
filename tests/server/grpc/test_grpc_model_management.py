"""Remote model management through the official clients: off by default, confined when on."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import attrs
import grpc
import pytest
import tritonclient.grpc as triton
from google.protobuf import text_format
from grpc_servers import Served, serving, write_python_model
from tensorflow_serving.apis import model_management_pb2, model_service_pb2_grpc
from tritonclient.utils import InferenceServerException

from servinglib import testing
from servinglib.core.servable_state import ManagerState
from servinglib.examples import HALF_PLUS_TWO
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.logging_config import LoggingConfig
from servinglib.server.management.model_management import ModelManagementOptions
from servinglib.server.server_core import ServerCore
from servinglib.testing import wait_until
from servinglib.testing.plugin import TEST_SERVER_CORE_OPTIONS

ENABLED = ModelManagementOptions(enabled=True)


@pytest.fixture
def layout(tmp_path: Path) -> Path:
    """``models/a`` (the served python model), ``models/tf`` (a SavedModel), ``outside/x``."""
    write_python_model(tmp_path / "models", "a")
    shutil.copytree(HALF_PLUS_TWO, tmp_path / "models" / "tf")
    write_python_model(tmp_path / "outside", "x")
    return tmp_path


@pytest.fixture
def core(layout: Path) -> Iterator[ServerCore]:
    """A core serving python model ``a`` from ``models/a``."""
    config = ModelServerConfig([ModelConfig.python("a", layout / "models" / "a")])
    with ServerCore(config, TEST_SERVER_CORE_OPTIONS) as core:
        yield core


def triton_client(served: Served) -> triton.InferenceServerClient:
    """A tritonclient.grpc client of ``served``."""
    return triton.InferenceServerClient(served.address)


def triton_load(served: Served, name: str, base_path: str | Path, platform: str) -> None:
    """RepositoryModelLoad of ``name`` from ``base_path``, through tritonclient."""
    client = triton_client(served)
    try:
        config = f'{{"base_path": "{base_path}", "platform": "{platform}"}}'
        client.load_model(name, config=config, client_timeout=60)
    finally:
        client.close()


def triton_error(
    served: Served, name: str, base_path: str | Path, platform: str
) -> tuple[str, str]:
    """The status and message of a RepositoryModelLoad expected to fail."""
    with pytest.raises(InferenceServerException) as caught:
        triton_load(served, name, base_path, platform)
    return str(caught.value.status()), str(caught.value.message())


def triton_load_error(served: Served, name: str, config: str | None) -> tuple[str, str]:
    """The status and message of a RepositoryModelLoad of ``name`` with ``config``, failing."""
    client = triton_client(served)
    try:
        with pytest.raises(InferenceServerException) as caught:
            client.load_model(name, config=config, client_timeout=60)
    finally:
        client.close()
    return str(caught.value.status()), str(caught.value.message())


def reload(served: Served, *models: ModelConfig) -> None:
    """HandleReloadConfigRequest with ``models``, through tensorflow-serving-api's stub."""
    request = model_management_pb2.ReloadConfigRequest()
    text = ModelServerConfig(models).to_text() if models else "model_config_list {}"
    text_format.Parse(text, request.config)
    with served.channel() as channel:
        stub = model_service_pb2_grpc.ModelServiceStub(channel)
        stub.HandleReloadConfigRequest(request, timeout=60)


def reload_error(served: Served, *models: ModelConfig) -> grpc.RpcError:
    """The error of a HandleReloadConfigRequest expected to fail."""
    with pytest.raises(grpc.RpcError) as caught:
        reload(served, *models)
    return caught.value


def test_management_is_refused_by_default(core: ServerCore, layout: Path, server_kind: str) -> None:
    """Without the flag, load, unload and reload answer PERMISSION_DENIED naming it; a serves."""
    with serving(core, server=server_kind) as served:
        client = triton_client(served)
        for call in (lambda: client.load_model("a"), lambda: client.unload_model("a")):
            with pytest.raises(InferenceServerException) as caught:
                call()
            assert caught.value.status() == "StatusCode.PERMISSION_DENIED"
            assert "--allow_remote_model_management" in str(caught.value.message())
        client.close()
        error = reload_error(served)
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "--allow_remote_model_management" in (error.details() or "")
    assert core.list_models() == ["a"]
    assert core.ready()


def test_management_is_allowed_with_the_flag(
    core: ServerCore, layout: Path, server_kind: str
) -> None:
    """With it, a SavedModel under the models' directory loads, unloads, and a reload applies."""
    with serving(core, ENABLED, server=server_kind) as served:
        triton_load(served, "tf", layout / "models" / "tf", "tensorflow")
        client = triton_client(served)
        assert client.is_model_ready("tf")
        client.unload_model("tf")
        wait_until(lambda: not client.is_model_ready("tf"), timeout_s=60)  # unloads finish later
        client.close()
        reload(
            served, core.config.model("a"), ModelConfig.tensorflow("tf", layout / "models" / "tf")
        )  # type: ignore[arg-type]
    assert core.list_models() == ["a", "tf"]


def test_paths_outside_the_roots_are_refused_alike(core: ServerCore, layout: Path) -> None:
    """An existing and a missing path outside the roots get one code and one message."""
    existing, missing = layout / "outside" / "x", layout / "outside" / "nope"
    with serving(core, ENABLED) as served:
        answers = {
            path: triton_error(served, "x", path, "tensorflow") for path in (existing, missing)
        }
        reloads = {
            path: reload_error(served, ModelConfig.tensorflow("x", path))
            for path in (existing, missing)
        }
    assert {code for code, _ in answers.values()} == {"StatusCode.PERMISSION_DENIED"}
    assert len({message.replace(str(path), "P") for path, (_, message) in answers.items()}) == 1
    assert {error.code() for error in reloads.values()} == {grpc.StatusCode.PERMISSION_DENIED}
    assert len({(e.details() or "").replace(str(p), "P") for p, e in reloads.items()}) == 1
    assert core.list_models() == ["a"]


def test_dot_dot_and_symlink_escapes_are_refused(core: ServerCore, layout: Path) -> None:
    """A path leaving the roots through ``..`` or a symbolic link is refused once resolved."""
    os.symlink(layout / "outside", layout / "models" / "link")
    escapes = [f"{layout}/models/../outside/x", f"{layout}/models/link/x"]
    with serving(core, ENABLED) as served:
        for path in escapes:
            code, message = triton_error(served, "x", path, "tensorflow")
            assert code == "StatusCode.PERMISSION_DENIED"
            assert "--model_management_roots" in message
    assert core.list_models() == ["a"]


def test_roots_can_be_set(core: ServerCore, layout: Path) -> None:
    """With allowed_roots naming ``outside``, its model loads and ``models/tf`` is refused."""
    options = ModelManagementOptions(
        enabled=True, allowed_roots=str(layout / "outside"), allow_python_models=True
    )
    with serving(core, options) as served:
        triton_load(served, "x", layout / "outside" / "x", "python")
        code, _ = triton_error(served, "tf", layout / "models" / "tf", "tensorflow")
    assert code == "StatusCode.PERMISSION_DENIED"
    assert core.list_models() == ["a", "x"]


def test_python_models_from_new_paths_need_the_second_flag(core: ServerCore, layout: Path) -> None:
    """A python model at a path the config does not serve is refused unless allowed; a's is not."""
    new = layout / "models" / "b"
    write_python_model(layout / "models", "b")
    with serving(core, ENABLED) as served:
        code, message = triton_error(served, "b", new, "python")
        assert code == "StatusCode.PERMISSION_DENIED"
        assert "--allow_remote_python_models" in message
        error = reload_error(served, core.config.model("a"), ModelConfig.python("b", new))  # type: ignore[arg-type]
        assert error.code() == grpc.StatusCode.PERMISSION_DENIED
        triton_load(served, "a", layout / "models" / "a", "python")  # the config's own path
    assert core.list_models() == ["a"]
    with serving(core, ModelManagementOptions(enabled=True, allow_python_models=True)) as served:
        triton_load(served, "b", new, "python")
    assert core.list_models() == ["a", "b"]


def test_an_empty_reload_leaves_the_server_not_ready(core: ServerCore) -> None:
    """A reload to no model unloads everything, and ServerReady answers false after it."""
    with serving(core, ENABLED) as served:
        client = triton_client(served)
        assert client.is_server_ready()
        reload(served)
        assert core.list_models() == []
        assert not client.is_server_ready()
        client.close()


def test_a_missing_path_under_the_roots_is_not_found(core: ServerCore, layout: Path) -> None:
    """Under the roots, a path that does not exist is NOT_FOUND naming it (not UNKNOWN)."""
    with serving(core, ENABLED) as served:
        code, message = triton_error(served, "m", layout / "models" / "m", "tensorflow")
    assert code == "StatusCode.NOT_FOUND"
    assert "Could not find base path" in message


def _versions(core: ServerCore, name: str, state: ManagerState | None = None) -> set[int]:
    """The versions of ``name`` the core knows (in any state, or in ``state``)."""
    versions = core.model_status(name).versions
    return {v.version for v in versions if state is None or v.state is state}


def test_a_symlink_repointed_after_the_check_is_not_followed(
    core: ServerCore, layout: Path
) -> None:
    """A loaded link serves where it pointed when checked, not outside where it points now."""
    write_python_model(layout / "outside", "escape")
    (layout / "outside" / "escape" / "1").rename(layout / "outside" / "escape" / "2")
    link = layout / "models" / "link"
    link.symlink_to(layout / "models" / "a")  # the config's own python path: no python flag needed
    for version in (1, 2):  # a control the operator's code loads: its link is followed at each poll
        write_python_model(layout / f"control{version}", "c")
        (layout / f"control{version}" / "c" / "1").rename(
            layout / f"control{version}" / "c" / str(version)
        )
    control = layout / "control_link"
    control.symlink_to(layout / "control1" / "c")
    with serving(core, ENABLED) as served:
        triton_load(served, "l", link, "python")
        core.load_model(ModelConfig.python("c", control))
        assert core.config.model("l") == ModelConfig.python("l", layout / "models" / "a")
        link.unlink()
        link.symlink_to(layout / "outside" / "escape")
        control.unlink()
        control.symlink_to(layout / "control2" / "c")
        # The poll that loads the control's version 2 saw the repointed link too, and before it.
        wait_until(lambda: 2 in _versions(core, "c", ManagerState.AVAILABLE), timeout_s=60)
    assert _versions(core, "l") == {1}


def test_a_failed_load_is_rolled_back(core: ServerCore, layout: Path) -> None:
    """A RepositoryModelLoad whose model fails answers why and leaves it unconfigured: ready."""
    broken = testing.write_python_model(layout / "models", "broken", "def (:\n")
    with serving(core, ModelManagementOptions(enabled=True, allow_python_models=True)) as served:
        code, message = triton_error(served, "broken", broken, "python")
        client = triton_client(served)
        assert client.is_server_ready()
        client.close()
    assert (code, "broken" in message) == ("StatusCode.INVALID_ARGUMENT", True)
    assert core.list_models() == ["a"]
    assert core.failed_models() == {}


def test_a_reload_may_only_keep_the_configs_log_prefixes(layout: Path) -> None:
    """A reload's filename_prefix must be one the config writes to; another is refused, unmade."""
    prefix = str(layout / "logs" / "a")
    logged = attrs.evolve(
        ModelConfig.python("a", layout / "models" / "a"),
        logging_config=LoggingConfig(sampling_rate=0.5, filename_prefix=prefix),
    )
    elsewhere = layout / "elsewhere" / "deep"
    with (
        ServerCore(ModelServerConfig([logged]), TEST_SERVER_CORE_OPTIONS) as core,
        serving(core, ENABLED) as served,
    ):
        for target in (str(elsewhere / "x"), "relative/x", f"{layout}/logs/../elsewhere/x"):
            moved = LoggingConfig(sampling_rate=1.0, filename_prefix=target)
            error = reload_error(served, attrs.evolve(logged, logging_config=moved))
            assert error.code() == grpc.StatusCode.PERMISSION_DENIED
            assert "logging_config.log_collector_config.filename_prefix" in (error.details() or "")
        kept = LoggingConfig(sampling_rate=1.0, filename_prefix=prefix)
        tf = ModelConfig.tensorflow("tf", layout / "models" / "tf")
        reload(
            served, attrs.evolve(logged, logging_config=kept), attrs.evolve(tf, logging_config=kept)
        )
        assert core.config.model("tf").logging_config == kept  # type: ignore[union-attr]
    assert not (layout / "elsewhere").exists()


MESSAGE_BOUND = 2048
"""The most UTF-8 bytes an error message may hold (MAX_MESSAGE_BYTES)."""


def test_hostile_loads_are_invalid_argument_with_short_messages(
    core: ServerCore, layout: Path
) -> None:
    """A NUL byte, a 100 KB path or 100,000-deep JSON: INVALID_ARGUMENT, a message under 2 KB."""
    models = layout / "models"
    configs = [
        json.dumps({"base_path": f"{models}/x\0y", "platform": "tensorflow"}),
        json.dumps({"base_path": f"{models}/" + "p" * 100_000, "platform": "tensorflow"}),
        json.dumps(
            {"base_path": f"{models}/" + "/".join(["q" * 200] * 500), "platform": "tensorflow"}
        ),
        "[" * 100_000 + "]" * 100_000,
    ]
    with serving(core, ENABLED) as served:
        answers = [triton_load_error(served, "x", config) for config in configs]
        named = triton_load_error(served, "n" * 1_000_000, None)
    assert {code for code, _ in answers} == {"StatusCode.INVALID_ARGUMENT"}
    assert max(len(message.encode()) for _, message in answers) <= MESSAGE_BOUND
    assert named[0] == "StatusCode.NOT_FOUND"
    assert 200 < len(named[1].encode()) <= MESSAGE_BOUND
    assert core.list_models() == ["a"]


def test_hostile_reloads_are_invalid_argument_with_short_messages(
    core: ServerCore, layout: Path
) -> None:
    """Reloads with a NUL byte, a 100 KB path, or nested 100,000 deep: INVALID_ARGUMENT, short."""
    bodies = []
    for path in (f"{layout}/models/a\0", f"{layout}/models/" + "p" * 100_000):
        request = model_management_pb2.ReloadConfigRequest()
        request.config.model_config_list.config.add(name="x", base_path=path)
        bodies.append(request.SerializeToString())
    bodies.append(b"\x7b" * 100_000 + b"\x7c" * 100_000)  # field 15: groups in groups
    errors = []
    with serving(core, ENABLED) as served, served.channel() as channel:
        call = channel.unary_unary("/tensorflow.serving.ModelService/HandleReloadConfigRequest")
        for body in bodies:
            with pytest.raises(grpc.RpcError) as caught:
                call(body, timeout=60)
            errors.append(caught.value)
    assert [e.code() for e in errors] == [grpc.StatusCode.INVALID_ARGUMENT] * 3
    assert max(len((e.details() or "").encode()) for e in errors) <= MESSAGE_BOUND
    assert core.list_models() == ["a"]
