"""What the server benchmarks share: the trivial servable, ports, pinning, the server process.

Imported by bench/rest.py, bench/grpc.py and their bounds (``python bench/NAME.py`` puts this
directory on sys.path).
"""

from __future__ import annotations

import argparse
import contextlib
import re
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Callable, Coroutine, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

TRIVIAL_MODELS = {"thread": "plus_one", "inline": "plus_one_inline"}
"""Execution mode → the name of the trivial servable declared in that mode."""

TRIVIAL_MODEL_PY = '''
import numpy as np
from servinglib.loaders import PythonModel, signature
from servinglib.servable import ExecutionMode, TensorSpec

class Model(PythonModel):
    """float32 [1,16] -> x + 1."""

    @signature(
        name="serving_default",
        inputs=[TensorSpec("x", np.float32, [1, 16])],
        outputs=[TensorSpec("y", np.float32, [1, 16])],
        execution_mode=ExecutionMode.{mode},
    )
    def predict(self, x):
        return {{"y": x + np.float32(1)}}
'''


NUMPY_MLP_PY = '''
import numpy as np
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    """The Keras MLP's shape in numpy: 256 -> Dense 256 relu x2 -> Dense 256 (seeded weights)."""

    def load(self, path):
        rng = np.random.default_rng(1)
        self.layers = [
            (rng.standard_normal((256, 256), np.float32) * 0.06, np.zeros(256, np.float32))
            for _ in range(3)
        ]

    @signature(
        name="serving_default",
        inputs=[TensorSpec("features", "float32", [-1, 256])],
        outputs=[TensorSpec("output_0", "float32", [-1, 256])],
    )
    def predict(self, features):
        x = features
        for i, (w, b) in enumerate(self.layers):
            x = x @ w + b
            if i < 2:
                np.maximum(x, 0, out=x)
        return {"output_0": x}
'''
"""A Python servable: 3 x Dense(256) in numpy (bench/batching.py, bench/grpc.py's batched cell)."""


LOGGING_RATES = (None, 0.01, 1.0)
"""--request-logging's servers: request logging off, at sampling 0.01 and at 1.0."""


def write_trivial_models(tmp: Path, sampling_rate: float | None = None) -> Path:
    """Both trivial servables under ``tmp``; the models.config serving them (python platform).

    ``sampling_rate``: each model logs its requests at that rate to TFRecord files under
    ``tmp/logs`` (None: no request logging).
    """
    lines = []
    for mode, model in TRIVIAL_MODELS.items():
        directory = tmp / model / "1"
        if not directory.exists():
            directory.mkdir(parents=True)
            (directory / "model.py").write_text(TRIVIAL_MODEL_PY.format(mode=mode.upper()))
        logging = ""
        if sampling_rate is not None:
            prefix = tmp / "logs" / f"{model}-{sampling_rate:g}"
            logging = (
                f' logging_config {{ log_collector_config {{ type: "file" '
                f'filename_prefix: "{prefix}" }} sampling_config {{ sampling_rate: '
                f"{sampling_rate} }} }}"
            )
        lines.append(
            f'  config {{ name: "{model}" base_path: "{tmp / model}" model_platform: "python"'
            f"{logging} }}"
        )
    config = tmp / (
        "models.config" if sampling_rate is None else f"logged-{sampling_rate:g}.config"
    )
    config.write_text("model_config_list {\n" + "\n".join(lines) + "\n}\n")
    return config


LOGGING_PASSES = 3
"""--request-logging's passes: each measures every (concurrency, rate) cell once, interleaved;
the best req/s of each cell is kept (drift and other load only ever slow a cell down)."""


def best_of_passes(
    passes: int,
    concurrencies: Sequence[int],
    ports: Mapping[float | None, int],
    measure_rps: Callable[[int, int], float],
) -> dict[tuple[float | None, int], float]:
    """(rate, concurrency) → the best of ``passes`` measurements ``measure_rps(port, conc)``."""
    best: dict[tuple[float | None, int], float] = {}
    for _ in range(passes):
        for concurrency in concurrencies:
            for rate, port in ports.items():
                rps = measure_rps(port, concurrency)
                best[rate, concurrency] = max(rps, best.get((rate, concurrency), 0.0))
    return best


def print_logging_ratios(rps: dict[tuple[float | None, int], float], label: str) -> None:
    """Each logging rate's req/s against logging off at the same concurrency (--request-logging).

    Targets (issue 22): at most 3 % slower at sampling 0.01, at most 15 % at 1.0.
    """
    print(f"\nRequest logging, {label}: req/s (ratio to logging off, same run)")
    for (rate, concurrency), value in sorted(rps.items(), key=lambda i: (i[0][1], i[0][0] or 0)):
        off = rps[None, concurrency]
        name = "off" if rate is None else f"sampling {rate:g}"
        print(f"  c={concurrency:<3} {name:<14} {value:9.0f} req/s  {value / off:6.3f}")
    for rate, allowed in ((0.01, 0.03), (1.0, 0.15)):
        for concurrency in sorted({c for _, c in rps}):
            cost = 1 - rps[rate, concurrency] / rps[None, concurrency]
            verdict = "PASS" if cost <= allowed else "MISS"
            print(
                f"{verdict} sampling {rate:g}, c={concurrency}: {cost:+.1%} throughput cost "
                f"(target <= {allowed:.0%})"
            )


_LOG_COUNT = re.compile(
    r'^:tensorflow:serving:request_log_count\{model_name="([^"]*)",status_code="([^"]*)"\} (\S+)$',
    re.MULTILINE,
)


def request_log_counts(rest_port: int) -> dict[str, float]:
    """The server's ``:tensorflow:serving:request_log_count`` by outcome (OK, dropped, ...)."""
    url = f"http://127.0.0.1:{rest_port}/monitoring/prometheus/metrics"
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    counts: dict[str, float] = {}
    for _model, status, value in _LOG_COUNT.findall(text):
        counts[status] = counts.get(status, 0) + float(value)
    return counts


def free_port() -> int:
    """A TCP port of 127.0.0.1 that was free a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def pinned(command: list[str], cpus: str | None) -> list[str]:
    """``command`` under ``taskset -c cpus`` (unchanged without cpus)."""
    return ["taskset", "-c", cpus, *command] if cpus else command


@contextlib.contextmanager
def running(
    command: list[str], log: Path, wait_ready: Callable[[subprocess.Popen[bytes]], None]
) -> Iterator[subprocess.Popen[bytes]]:
    """Runs ``command`` (output to ``log``) until the block ends: SIGTERM, then SIGKILL.

    ``wait_ready(process)`` returns once the server answers (raise if it cannot).
    """
    with open(log, "wb") as out:
        process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_ready(process)
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


_REQUEST_COUNT = re.compile(r"^:tensorflow:serving:request_count\{([^}]*)\} (\S+)$", re.MULTILINE)


def request_counts(rest_port: int) -> dict[tuple[str, str], float]:
    """The server's ``:tensorflow:serving:request_count`` by (model, status), scraped."""
    url = f"http://127.0.0.1:{rest_port}/monitoring/prometheus/metrics"
    with urllib.request.urlopen(url, timeout=10) as reply:
        text = reply.read().decode()
    counts: dict[tuple[str, str], float] = {}
    for labels, value in _REQUEST_COUNT.findall(text):
        fields = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        key = (fields.get("model_name", ""), fields.get("status", ""))
        counts[key] = counts.get(key, 0.0) + float(value)
    return counts


def bound_command(script: str, port: int, config: Path) -> list[str]:
    """The command starting ``bench/<script>`` (a bound server) on ``port`` with ``config``."""
    path = Path(__file__).resolve().parent / script
    return [sys.executable, str(path), f"--port={port}", f"--config={config}"]


def run_bound(doc: str, serve: Callable[[int, Any], Coroutine[Any, Any, None]]) -> None:
    """The command line of a bound server (``--port``, ``--config``), on uvloop until SIGTERM.

    ``serve(port, core)`` serves the ServerCore of the trivial models' config (python platform,
    code execution allowed); the core is closed after it returns.
    """
    import uvloop

    from servinglib.loaders.python import PythonPlatformConfig
    from servinglib.server import ServerCore, ServerCoreOptions, read_model_server_config

    parser = argparse.ArgumentParser(description=doc.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--config", type=Path, required=True)
    arguments = parser.parse_args()
    options = ServerCoreOptions(
        platform_configs={"python": PythonPlatformConfig(allow_code_execution=True)}
    )
    core = ServerCore(read_model_server_config(arguments.config), options)
    try:
        uvloop.run(serve(arguments.port, core))
    finally:
        core.close()
