"""Triton Inference Server itself, on 127.0.0.1: the oracle of our Triton compatibility tests.

The server is the ``tritonserver`` binary the ``nvidia-pytriton`` wheel ships (Triton 2.51 in
0.7.0, with its Python backend and one backend stub per Python minor version); we use none of
pytriton's Python API, so ``./dev setup`` installs the wheel without its dependencies (they pin
numpy < 2).  The stub embeds the interpreter it finds first on ``PATH`` and imports numpy
through Triton's C++ code, which is built against numpy 1: so it runs in a venv of its own,
``.venv/triton-python`` (numpy 1.26), that ``./dev setup`` makes.  Where either is missing,
:func:`find_triton` raises :class:`TritonUnavailableError` with the reason, and tests skip with it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.ports import free_port

STARTUP_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 15.0
_SETUP_HINT = "./dev setup installs it"


class TritonUnavailableError(Exception):
    """Triton cannot run here; the message says why (a test skips with it)."""


@dataclass(frozen=True)
class TritonInstall:
    """Where the wheel's server, libraries and Python backend are, and the stub's Python."""

    server: Path
    libraries: Path
    python_backend: Path
    stub: Path
    stub_python_bin: Path


@dataclass(frozen=True)
class RunningTriton:
    """A started server: its HTTP and gRPC addresses (``host:port``, as tritonclient wants),
    its log and its process id."""

    http_url: str
    grpc_url: str
    log: Path
    pid: int

    def log_text(self) -> str:
        """What the server has written so far (stdout and stderr)."""
        return self.log.read_text(encoding="utf-8", errors="replace")


ADD_SUB_CONFIG = """
backend: "python"
max_batch_size: 8
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
instance_group [ { kind: KIND_CPU } ]
"""
"""The config.pbtxt of ``add_sub``: two [batch, 4] FP32 inputs, their sum and difference."""

ADD_SUB_MODEL_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
            outputs = [pb_utils.Tensor("OUTPUT0", a + b), pb_utils.Tensor("OUTPUT1", a - b)]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
"""
"""Version 1's model.py of ``add_sub``, written against Triton's Python backend API."""


def write_add_sub(repository: Path, name: str = "add_sub") -> Path:
    """Writes the ``add_sub`` Python-backend model into ``repository``; returns its directory."""
    model = repository / name
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(ADD_SUB_CONFIG, encoding="utf-8")
    (model / "1" / "model.py").write_text(ADD_SUB_MODEL_PY, encoding="utf-8")
    return model


def skip_without_triton() -> TritonInstall:
    """The installed Triton; skips the calling test, saying why, where it cannot run."""
    try:
        return find_triton()
    except TritonUnavailableError as reason:
        pytest.skip(str(reason))


def find_triton() -> TritonInstall:
    """The installed Triton; raises TritonUnavailableError saying what is missing."""
    spec = importlib.util.find_spec("pytriton")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        raise TritonUnavailableError(
            f"nvidia-pytriton (tritonserver) is not installed; {_SETUP_HINT}"
        )
    package = Path(next(iter(spec.submodule_search_locations)))
    dist = package / "tritonserver"
    minor = f"{sys.version_info.major}.{sys.version_info.minor}"
    stub = dist / "python_backend_stubs" / minor / "triton_python_backend_stub"
    if not stub.is_file():
        raise TritonUnavailableError(
            f"nvidia-pytriton has no Python backend stub for Python {minor}"
        )
    stub_python_bin = Path(sys.prefix) / "triton-python" / "bin"
    if not (stub_python_bin / "python").exists():
        raise TritonUnavailableError(
            f"{stub_python_bin.parent} (numpy 1, for Triton's Python backend) is missing; "
            f"{_SETUP_HINT} where numpy 1 has a wheel for Python {minor}"
        )
    return TritonInstall(
        server=dist / "bin" / "tritonserver",
        libraries=package.parent / "nvidia_pytriton.libs",
        python_backend=dist / "backends" / "python",
        stub=stub,
        stub_python_bin=stub_python_bin,
    )


@contextlib.contextmanager
def running_triton(
    repository: Path, workdir: Path, options: Sequence[str] = (), prefix: Sequence[str] = ()
) -> Iterator[RunningTriton]:
    """Triton serving ``repository`` on 127.0.0.1 until the block ends; ready when it starts.

    ``workdir`` (empty, owned by the caller) takes the backend directory and the log;
    ``options`` are more of Triton's flags (``--model-control-mode=explicit``); ``prefix`` runs
    the server under a command (``taskset -c 0``: its stub processes inherit it).  Raises
    TritonUnavailableError as :func:`find_triton`, and RuntimeError with the log if the server exits
    or is not ready within STARTUP_TIMEOUT_S.
    """
    install = find_triton()
    backends = _backend_directory(install, workdir / "backends")
    http_port, grpc_port = free_port(), free_port()
    log = workdir / "tritonserver.log"
    args = [
        *prefix,
        str(install.server),
        f"--model-repository={repository}",
        f"--backend-directory={backends}",
        "--http-address=127.0.0.1",
        f"--http-port={http_port}",
        "--grpc-address=127.0.0.1",
        f"--grpc-port={grpc_port}",
        "--allow-metrics=false",
        "--exit-timeout-secs=5",
        # Shared-memory regions of its own, so that two servers (parallel test runs) never share.
        f"--backend-config=python,shm-region-prefix-name=servinglib_{os.getpid()}_{http_port}_",
        *options,
    ]
    with log.open("wb") as sink:
        process = subprocess.Popen(args, stdout=sink, stderr=subprocess.STDOUT, env=_env(install))
    server = RunningTriton(f"127.0.0.1:{http_port}", f"127.0.0.1:{grpc_port}", log, process.pid)
    try:
        _wait_ready(server, process)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _backend_directory(install: TritonInstall, backends: Path) -> Path:
    """A backend directory whose Python backend has the stub of this Python beside it."""
    python = backends / "python"
    python.mkdir(parents=True)
    for source in install.python_backend.iterdir():
        (python / source.name).symlink_to(source)
    (python / install.stub.name).symlink_to(install.stub)
    return backends


def _env(install: TritonInstall) -> dict[str, str]:
    """The server's environment: its libraries, libpython, and the stub's Python first on PATH."""
    env = dict(os.environ)
    library_path = [str(install.libraries), sysconfig.get_config_var("LIBDIR") or ""]
    if env.get("LD_LIBRARY_PATH"):
        library_path.append(env["LD_LIBRARY_PATH"])
    env["LD_LIBRARY_PATH"] = os.pathsep.join(path for path in library_path if path)
    env["PATH"] = os.pathsep.join([str(install.stub_python_bin), env.get("PATH", "")])
    return env


def _wait_ready(server: RunningTriton, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + STARTUP_TIMEOUT_S
    ready_url = f"http://{server.http_url}/v2/health/ready"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"tritonserver exited with {process.returncode}:\n{server.log_text()}"
            )
        with contextlib.suppress(httpx.TransportError):
            if httpx.get(ready_url, timeout=1.0).status_code == 200:
                _check_is_triton(server)
                return
        time.sleep(0.05)  # a server process starting: no event to wait on
    raise RuntimeError(f"tritonserver was not ready in {STARTUP_TIMEOUT_S} s:\n{server.log_text()}")


def _check_is_triton(server: RunningTriton) -> None:
    """Refuse a ready answer from another server on Triton's port (which a port race once gave)."""
    name = httpx.get(f"http://{server.http_url}/v2", timeout=1.0).json().get("name")
    if name != "triton":
        raise RuntimeError(f"{server.http_url} is served by {name!r}, not tritonserver")
