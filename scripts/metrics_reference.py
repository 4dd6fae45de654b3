"""Regenerates the series list of docs/reference/metrics.md from a real scrape.

Starts ``servinglib-server`` with metrics, batching and request logging on a
Python model, sends a REST and a gRPC prediction, scrapes the metrics and
writes every series (name and label names, as the scrape shows them)
between the markers of docs/reference/metrics.md.  The test
``tests/server/cli/test_metrics_reference.py`` compares a scrape with it.

Usage: ``.venv/bin/python scripts/metrics_reference.py``
"""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import httpx

DOC = Path(__file__).resolve().parent.parent / "docs" / "reference" / "metrics.md"
BEGIN = "<!-- series:begin -->"
END = "<!-- series:end -->"

MODEL_PY = """
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    @signature(name="serving_default", inputs=[TensorSpec("x", "float32", [-1])],
               outputs=[TensorSpec("y", "float32", [-1])], response_cache=True)
    def predict(self, x):
        return {"y": x * 2}
"""

CONFIG = """
model_config_list {
  config {
    name: "m" base_path: "%s" model_platform: "python"
    logging_config {
      log_collector_config { type: "file" filename_prefix: "%s" }
      sampling_config { sampling_rate: 1.0 }
    }
  }
}
"""

_SAMPLE = re.compile(r"^([^{\s]+)(?:\{(.*)\})? \S+$")
_LABEL = re.compile(r'(\w+)="(?:[^"\\]|\\.)*"')


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


def series_of(text: str) -> list[str]:
    """Each distinct series of a Prometheus text scrape: ``# TYPE`` lines and ``name{labels}``."""
    found: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            found.add(line)
        elif line and not line.startswith("#"):
            match = _SAMPLE.match(line)
            assert match is not None, line
            labels = sorted(_LABEL.findall(match.group(2) or ""))
            found.add(f"{match.group(1)}{{{','.join(labels)}}}" if labels else match.group(1))
    return sorted(found, key=lambda s: (s.removeprefix("# TYPE ").split(" ")[0], s))


def scrape_a_server() -> str:
    """The metrics text of a real server that answered one REST and one gRPC prediction."""
    import grpc
    import numpy as np

    from servinglib.codecs.tensor import from_numpy
    from servinglib.protos import predict_pb2

    with tempfile.TemporaryDirectory() as root:
        version = Path(root, "m", "1")
        version.mkdir(parents=True)
        (version / "model.py").write_text(textwrap.dedent(MODEL_PY))
        config = Path(root, "models.config")
        config.write_text(CONFIG % (Path(root, "m"), Path(root, "logs", "m")))
        rest, port = _free_port(), _free_port()
        process = subprocess.Popen(
            [
                sys.executable, "-m", "servinglib", f"--rest_api_port={rest}", f"--port={port}",
                "--rest_api_host=127.0.0.1", "--grpc_host=127.0.0.1",
                f"--model_config_file={config}", "--allow_python_code_execution",
                "--enable_metrics", "--enable_batching", "--cache_config=local,size=1048576",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            url = f"http://127.0.0.1:{rest}"
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"{url}/v2/health/ready").status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline or process.poll() is not None:
                    raise RuntimeError("the server did not become ready")
                time.sleep(0.05)
            answer = httpx.post(f"{url}/v1/models/m:predict", json={"instances": [1.0]})
            answer.raise_for_status()
            request = predict_pb2.PredictRequest()
            request.model_spec.name = "m"
            request.inputs["x"].CopyFrom(from_numpy(np.ones(1, np.float32)))
            with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
                channel.unary_unary(
                    "/tensorflow.serving.PredictionService/Predict",
                    request_serializer=lambda m: m.SerializeToString(),
                    response_deserializer=bytes,
                )(request, timeout=30)
            # The request log's writer counts its records when it writes them, every 50 ms.
            while True:
                text = httpx.get(f"{url}/monitoring/prometheus/metrics").text
                if 'request_log_count{model_name="m",status_code="OK"} 2' in text:
                    return text
                if time.monotonic() > deadline:
                    raise RuntimeError("the request log never counted both requests")
                time.sleep(0.05)
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(60)


def documented_series(doc: str) -> list[str]:
    """The series listed between the markers of the metrics reference."""
    block = doc.split(BEGIN, 1)[1].split(END, 1)[0]
    return [line for line in block.splitlines() if line and not line.startswith(("<", "`"))]


def rewrite(doc: str, series: list[str]) -> str:
    """``doc`` with the block between the markers replaced by ``series``."""
    head, rest = doc.split(BEGIN, 1)
    tail = rest.split(END, 1)[1]
    block = "\n".join(["", "<!-- excerpt -->", "```text", *series, "```", ""])
    return f"{head}{BEGIN}{block}{END}{tail}"


if __name__ == "__main__":
    DOC.write_text(rewrite(DOC.read_text(), series_of(scrape_a_server())))
    print(f"rewrote the series list of {DOC}")
