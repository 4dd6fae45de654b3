"""Serving from S3 (moto's server): publication latency, download throughput, warm restarts.

A SavedModel of ``--size-mb`` (400 by default) in about 20 files (variables
sharded at 20 MB) is uploaded to a moto S3 server on 127.0.0.1;
``servinglib-server`` serves it from ``s3://`` with 1 s polls.  Prints:

- publication, ``--runs`` times: a new version uploaded object by object;
  the time from the last object's upload to the first answer from the new
  version (asked every 20 ms), beside what it is made of as the server logs
  it (the download, the load) and the poll period.  Target: nothing but poll + download + load
  (the rest under 0.25 s at p95; a new version waits one or two polls, as
  its listing must hold still once).
- download throughput of the server's copies of new versions (p50) against
  a plain ``s3fs.get`` of the same prefix in this process.  Target: at least 0.9x.
- restart to ready with the cache warm against cold.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import requests
from _common import percentile, print_environment, print_target
from _servers import free_port, pinned, running

POLL_S = 1.0
SHARD_MB = 20
TIMEOUT_S = 300.0
_DOWNLOADED = re.compile(
    r"Downloaded version (\d+) of \S+ \((\d+) files, ([0-9.]+) MB\) in ([0-9.]+) s"
)
_LOADED = re.compile(r"\bm v(\d+) available in ([0-9.]+) s")
_REQUEST: dict[str, Any] = {
    "inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [3.0]}]
}


def write_saved_model(path: Path, factor: float, size_bytes: int) -> None:
    """A SavedModel answering ``y = factor * x`` with variables sharded at SHARD_MB."""
    import tensorflow as tf

    class Scaler(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.factor = tf.Variable(factor, dtype=tf.float32)
            count = max(1, size_bytes // (SHARD_MB << 20))
            per = max(1, size_bytes // count // 4)
            self.ballast = [tf.Variable(tf.zeros([per], tf.float32)) for _ in range(count)]

        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")], autograph=False)
        def predict(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"y": x * self.factor}

    module = Scaler()
    policy = tf.train.experimental.MaxShardSizePolicy(max_shard_size=SHARD_MB << 20)
    options = tf.saved_model.SaveOptions(experimental_sharding_callback=policy)
    tf.saved_model.save(
        module, str(path), signatures={"serving_default": module.predict}, options=options
    )


PROBE_S = 0.02
"""How often the server is asked whether the new version answers: each request costs the
server about a millisecond of its one CPU, which asked every 2 ms would halve its download."""


def _wait(predicate: Callable[[], object], what: str) -> None:
    deadline = time.monotonic() + TIMEOUT_S
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(PROBE_S)  # a benchmark's poll of another process's progress


class Server:
    """servinglib-server serving ``m`` from ``s3://models/m``."""

    def __init__(self, root: Path, cache: Path, stack: ExitStack) -> None:
        self.log = root / f"server-{time.monotonic_ns()}.log"
        self.rest_port = free_port()
        command = [
            sys.executable,
            "-m",
            "servinglib",
            f"--port={free_port()}",
            f"--rest_api_port={self.rest_port}",
            "--model_name=m",
            "--model_base_path=s3://models/m",
            "--model_platform=tensorflow",
            f"--model_cache_dir={cache}",
            f"--file_system_poll_wait_seconds={POLL_S}",
        ]
        started = time.monotonic()
        stack.enter_context(
            running(
                pinned(command, os.environ.get("SERVINGLIB_BENCH_SERVER_CPUS")),
                self.log,
                self._ready,
            )
        )
        self.start_s = time.monotonic() - started

    def _ready(self, process: object) -> None:
        url = f"http://127.0.0.1:{self.rest_port}/v2/health/ready"

        def ready() -> bool:
            try:
                return requests.get(url, timeout=1).status_code == 200
            except requests.RequestException:
                return False

        _wait(ready, "the server never became ready")

    def answer(self) -> float | None:
        url = f"http://127.0.0.1:{self.rest_port}/v2/models/m/infer"
        try:
            return float(
                requests.post(url, json=_REQUEST, timeout=5).json()["outputs"][0]["data"][0]
            )
        except (requests.RequestException, KeyError, ValueError):
            return None

    def logged(self, pattern: re.Pattern[str], version: int) -> tuple[str, ...]:
        for match in pattern.finditer(self.log.read_text(errors="replace")):
            if int(match.group(1)) == version:
                return match.groups()
        return ()


def _publish(
    store: Any,  # noqa: ANN401 - an s3fs file system
    server: Server,
    exports: list[Path],
    runs: int,
) -> tuple[list[float], list[tuple[float, float, float]]]:
    """Uploads versions 2.. object by object; per run: total, and (download, load, rest)."""
    publication, parts = [], []
    for run in range(runs):
        version = run + 2
        export = exports[version - 1]
        for file in sorted(p for p in export.rglob("*") if p.is_file()):
            store.put_file(str(file), f"models/m/{version}/{file.relative_to(export).as_posix()}")
        uploaded = time.monotonic()

        def answered(expected: float = 3.0 * version) -> bool:
            return server.answer() == expected

        def loaded(version: int = version) -> bool:
            return bool(server.logged(_LOADED, version))

        _wait(answered, f"version {version} never answered")
        total = time.monotonic() - uploaded
        _wait(loaded, "no load logged")
        down = float(server.logged(_DOWNLOADED, version)[3])
        load = float(server.logged(_LOADED, version)[1])
        publication.append(total)
        parts.append((down, load, total - down - load))
        rest = total - down - load
        print(f"   v{version}: {total:.2f} s = download {down:.2f} + load {load:.2f}", end="")
        print(f" + rest {rest:.2f}")
    return publication, parts


def _start_moto() -> Any:  # noqa: ANN401 - moto's ThreadedMotoServer
    """A moto S3 server on 127.0.0.1, and the AWS environment pointing at it."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no line per request
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    os.environ.update(
        AWS_ENDPOINT_URL=f"http://{host}:{port}",
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_REGION="us-east-1",
    )
    return moto


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=400, help="the SavedModel's size")
    parser.add_argument("--runs", type=int, default=3, help="publications measured")
    args = parser.parse_args()
    print_environment(
        f"remote_store: a {args.size_mb} MB SavedModel on a moto S3 server, {POLL_S} s polls"
    )
    import s3fs

    moto = _start_moto()
    store = s3fs.S3FileSystem(use_listings_cache=False, skip_instance_cache=True)
    store.mkdir("models")
    root = Path(tempfile.mkdtemp(prefix="servinglib-remote-bench-"))
    try:
        exports = []
        for version in range(1, args.runs + 2):
            print(f"   writing version {version} ({args.size_mb} MB) ...", flush=True)
            write_saved_model(root / "exports" / str(version), float(version), args.size_mb << 20)
            exports.append(root / "exports" / str(version))
        files = sum(1 for p in exports[0].rglob("*") if p.is_file())
        print(f"   {files} files per version")
        store.put(str(exports[0]), "models/m/1", recursive=True)

        started = time.monotonic()
        store.get("models/m/1", str(root / "plain-get"), recursive=True)
        plain_s = time.monotonic() - started
        size_mb = sum(p.stat().st_size for p in exports[0].rglob("*") if p.is_file()) / 1e6

        cache = root / "cache"
        with ExitStack() as stack:
            server = Server(root, cache, stack)
            cold_s = server.start_s
            publication, parts = _publish(store, server, exports, args.runs)
        with ExitStack() as stack:
            warm_s = Server(root, cache, stack).start_s

        ordered = sorted(publication)
        rest = sorted(p[2] for p in parts)
        print()
        print(f"publication (last object uploaded -> first answer), {args.runs} runs:")
        print(f"  total p50 {percentile(ordered, 0.5):.2f} s, max {ordered[-1]:.2f} s")
        print(
            f"  download p50 {percentile(sorted(p[0] for p in parts), 0.5):.2f} s, "
            f"load p50 {percentile(sorted(p[1] for p in parts), 0.5):.2f} s, "
            f"rest (polls, listing, answer) p50 {percentile(rest, 0.5):.2f} s, max {rest[-1]:.2f} s"
        )
        print_target(rest[-1] <= 2 * POLL_S + 0.25, "publication: rest <= 2 polls + 0.25 s")
        # The downloads of new versions (the first one shares the CPU with the server's start).
        server_mb_s = size_mb / percentile(sorted(p[0] for p in parts), 0.5)
        plain_mb_s = size_mb / plain_s
        print(f"download of {size_mb:.0f} MB (p50 of the new versions): ", end="")
        print(f"the server {server_mb_s:.0f} MB/s, ", end="")
        print(f"plain s3fs.get {plain_mb_s:.0f} MB/s: {server_mb_s / plain_mb_s:.2f}x")
        print_target(server_mb_s >= 0.9 * plain_mb_s, "download >= 0.9x s3fs.get")
        print(f"start to ready: cold cache {cold_s:.2f} s, warm {warm_s:.2f} s ", end="")
        print(f"({cold_s / warm_s:.1f}x faster warm)")
    finally:
        moto.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
