"""The image without a container engine: its Dockerfile's shape, its install, its entrypoint.

No container engine runs here, so the Dockerfile is kept a thin wrapper around
deploy/docker/install-servinglib, and the tests run that script (the python variant, for real,
into a fresh virtual environment), then the image's exact entrypoint with the KServe runtime's
arguments against a temporary ``/mnt/models``, as the image's user when the tests run as root.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from collections.abc import Iterator
from pathlib import Path

import grpc
import httpx
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from servinglib.examples import HALF_PLUS_TWO
from servinglib.testing import wait_until
from tests.deploy.manifests import (
    INSTALL_SCRIPT,
    KSERVE,
    ROOT,
    dockerfile_stages,
    exec_form,
    one,
)
from tests.ports import free_port

IMAGE_UID = 10001
MODEL_PY = """
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    @signature(name="serving_default", inputs=[TensorSpec("x", "float32", [-1])],
               outputs=[TensorSpec("y", "float32", [-1])])
    def predict(self, x):
        return {"y": x * 3}
"""


def _final_stage() -> dict[str, list[str]]:
    stage: dict[str, list[str]] = {}
    for instruction, arguments in dockerfile_stages()[-1]:
        stage.setdefault(instruction, []).append(arguments)
    return stage


def test_the_dockerfile_is_multi_stage_slim_and_non_root() -> None:
    """Two stages on a slim official Python; the last installs nothing, runs as a numeric user."""
    stages = dockerfile_stages()
    assert len(stages) == 2
    text = (ROOT / "Dockerfile").read_text()
    assert "ARG PYTHON_IMAGE=python:3.11-slim-bookworm" in text
    build, final = (dict.fromkeys(i for i, _ in stage) for stage in stages)
    assert "RUN" in build
    [install] = [a for i, a in stages[0] if i == "RUN"]
    assert install.startswith("install-servinglib /opt/servinglib")
    last = _final_stage()
    # The final stage copies the built environment; its only RUN adds the user (no pip, no apt).
    assert [a for a in last["RUN"] if "pip" in a or "apt" in a] == []
    assert any(a.startswith("--from=build /opt/servinglib") for a in last["COPY"])
    [user] = last["USER"]
    uid, _, gid = user.partition(":")
    assert (int(uid), int(gid)) == (IMAGE_UID, IMAGE_UID)
    assert "ARG" in final


def test_the_entrypoint_is_the_server_in_exec_form() -> None:
    """ENTRYPOINT ["servinglib-server"] (SIGTERM reaches it as PID 1), CMD TF Serving's ports."""
    last = _final_stage()
    [entrypoint] = last["ENTRYPOINT"]
    [command] = last["CMD"]
    assert exec_form(entrypoint) == ["servinglib-server"]
    assert exec_form(command) == ["--port=8500", "--rest_api_port=8501"]


def test_the_variants_install_the_readmes_extras() -> None:
    """VARIANT tensorflow installs servinglib[all] as the README says; python leaves TF out."""
    script = INSTALL_SCRIPT.read_text()
    assert "tensorflow) extras=all ;;" in script
    assert "python) extras=rest,metrics ;;" in script
    assert "pip install '.[all]'" in (ROOT / "README.md").read_text()
    assert '--constraint "$source/constraints.txt"' in script
    assert "ARG VARIANT=tensorflow" in (ROOT / "Dockerfile").read_text()


def test_the_image_serves_buckets_unless_told_not_to() -> None:
    """Both variants add the cloud extra (s3fs, gcsfs, adlfs) unless CLOUD=0: the Kubernetes
    guide's s3:// base_path works in the shipped image."""
    script = INSTALL_SCRIPT.read_text()
    assert 'if [ "${CLOUD:-1}" != 0 ]; then\n    extras="$extras,cloud"' in script
    dockerfile = (ROOT / "Dockerfile").read_text()
    build_stage = dockerfile.split("\nFROM ")[1]
    assert "ARG CLOUD=1" in build_stage  # in the environment of the stage's RUN


@pytest.fixture(scope="module")
def image_venv() -> Iterator[Path]:
    """The python variant installed by the image's own script into a fresh environment."""
    prefix = Path(tempfile.mkdtemp(prefix="servinglib-image-")) / "opt"
    done = subprocess.run(
        ["sh", str(INSTALL_SCRIPT), str(prefix), "python", str(ROOT)],
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    prefix.parent.chmod(0o755)
    yield prefix
    shutil.rmtree(prefix.parent)


def test_the_python_variant_has_no_tensorflow(image_venv: Path) -> None:
    """The python variant's environment serves REST, metrics and buckets (s3fs, gcsfs, adlfs),
    and holds no TensorFlow."""
    python = image_venv / "bin" / "python"
    modules = ("tensorflow", "uvicorn", "prometheus_client", "s3fs", "gcsfs", "adlfs")
    probe = f"import importlib.util as u; print([bool(u.find_spec(m)) for m in {modules}])"
    found = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=True)
    assert found.stdout.strip() == "[False, True, True, True, True, True]"
    assert (image_venv / "bin" / "servinglib-server").is_file()


def _kserve_command(bin_dir: Path, mnt_models: Path, name: str) -> tuple[list[str], int, int]:
    """The image's entrypoint + the ServingRuntime's args, ports and /mnt/models substituted."""
    [entrypoint] = _final_stage()["ENTRYPOINT"]
    [container] = one(KSERVE, "ServingRuntime")["spec"]["containers"]
    rest, grpc_port = free_port(), free_port()
    substitutions = {
        "{{.Name}}": name,
        "/mnt/models": str(mnt_models),
        "--rest_api_port=8080": f"--rest_api_port={rest}",
        "--port=9000": f"--port={grpc_port}",
    }
    args = []
    for arg in container["args"]:
        for old, new in substitutions.items():
            arg = arg.replace(old, new)  # noqa: PLW2901 - each substitution in turn
        args.append(arg)
    program, *rest_of_entrypoint = exec_form(entrypoint)
    return [str(bin_dir / program), *rest_of_entrypoint, *args], rest, grpc_port


def _as_image_user(program: str) -> dict[str, int]:
    """Popen's arguments to run as the image's user: when root, and the interpreter allows it.

    (An interpreter under a private home, as pyenv's under /root, cannot run as another user.)
    """
    interpreter = Path(os.path.realpath(Path(program).with_name("python")))
    reachable = all(p.stat().st_mode & 0o001 for p in interpreter.parents)
    if os.geteuid() != 0 or not reachable:
        return {}
    return {"user": IMAGE_UID, "group": IMAGE_UID}


def _serve_and_probe(command: list[str], rest: int, grpc_port: int, name: str) -> dict[str, object]:
    """Runs ``command``, waits for readiness, probes it, stops it with SIGTERM; what it saw."""
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"},
        **_as_image_user(command[0]),  # type: ignore[arg-type]
    )
    http = httpx.Client(base_url=f"http://127.0.0.1:{rest}", timeout=10)
    try:

        def ready() -> bool:
            if process.poll() is not None:
                return True
            try:
                return http.get("/v2/health/ready").status_code == 200
            except httpx.HTTPError:
                return False

        wait_until(ready, timeout_s=90)
        assert process.poll() is None, process.communicate()[0]
        seen: dict[str, object] = {
            "live": http.get("/v2/health/live").status_code,
            "metrics": http.get("/monitoring/prometheus/metrics").status_code,
            "status": http.get(f"/v1/models/{name}").json(),
            "infer": http.post(
                f"/v2/models/{name}/infer",
                json={"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1, 2]}]},
            ).json(),
        }
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            seen["grpc_health"] = health.Check(health_pb2.HealthCheckRequest(), timeout=10).status
        process.send_signal(signal.SIGTERM)
        seen["exit"] = process.wait(timeout=60)
        return seen
    finally:
        http.close()
        if process.poll() is None:
            process.kill()
        process.communicate(timeout=30)


@pytest.fixture
def mnt_models() -> Iterator[Path]:
    """An empty /mnt/models stand-in that the image's user can read."""
    directory = Path(tempfile.mkdtemp(prefix="mnt-models-"))
    directory.chmod(0o755)
    yield directory
    shutil.rmtree(directory)


@pytest.mark.parametrize("layout", ["bare", "numbered"])
def test_the_image_entrypoint_serves_kserves_mnt_models(
    image_venv: Path, mnt_models: Path, layout: str
) -> None:
    """The python variant, run as the image runs it under KServe, serves /mnt/models either way."""
    version_dir = mnt_models if layout == "bare" else mnt_models / "3"
    version_dir.mkdir(exist_ok=True)
    (version_dir / "model.py").write_text(textwrap.dedent(MODEL_PY))
    for path in (mnt_models, version_dir):
        path.chmod(0o755)
    command, rest, grpc_port = _kserve_command(image_venv / "bin", mnt_models, "my-model")
    seen = _serve_and_probe(command, rest, grpc_port, "my-model")
    version = "0" if layout == "bare" else "3"
    assert seen["live"] == seen["metrics"] == 200
    assert seen["status"] == {
        "model_version_status": [
            {
                "version": version,
                "state": "AVAILABLE",
                "status": {"error_code": "OK", "error_message": ""},
            }
        ]
    }
    infer = seen["infer"]
    assert isinstance(infer, dict)
    assert (infer["model_version"], infer["outputs"][0]["data"]) == (version, [3.0, 6.0])
    assert seen["grpc_health"] == health_pb2.HealthCheckResponse.SERVING
    assert seen["exit"] == 0


def test_the_tensorflow_entrypoint_serves_a_bare_saved_model(mnt_models: Path) -> None:
    """The same command line with servinglib[all] (the tensorflow variant's install, this .venv)
    serves a SavedModel that the storage initializer left bare in /mnt/models."""
    shutil.copytree(Path(HALF_PLUS_TWO) / "2", mnt_models, dirs_exist_ok=True)
    for path in [mnt_models, *mnt_models.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    command, rest, grpc_port = _kserve_command(
        Path(sys.executable).parent, mnt_models, "half-plus-two"
    )
    seen = _serve_and_probe(command, rest, grpc_port, "half-plus-two")
    infer = seen["infer"]
    assert isinstance(infer, dict)
    assert (infer["model_version"], infer["outputs"][0]["data"]) == ("0", [3.5, 4.0])
    assert seen["exit"] == 0
