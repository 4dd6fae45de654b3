"""Ways people publish a model version into a watched base path, and the models they publish.

Shared by tests/sources/test_publishing.py and bench/publish.py.  Every
publisher copies the version directory ``source`` to ``base/<version>`` the
way its tool does, and returns once it is done (the writer's exit).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tarfile
import tempfile
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

Publisher = Callable[[Path, Path, int], None]
"""``publish(source, base, version)``: copies version directory ``source`` to ``base/version``."""

CHUNKS_PER_FILE = 12
"""A slow writer writes each big file in this many chunks..."""
CHUNK_PAUSE_S = 0.08
"""...pausing this long after each (well under the tests' 1 s settle window)."""


def _files(source: Path) -> Iterator[Path]:
    """The files under ``source``, the entry point first (the worst order for a loader)."""
    found = sorted(p for p in source.rglob("*") if p.is_file())
    return iter(sorted(found, key=lambda p: p.name not in ("model.py", "saved_model.pb")))


def _write_slowly(
    source: Path,
    target: Path,
    *,
    stop_after_bytes: int | None = None,
    pause_s: float = CHUNK_PAUSE_S,
) -> bool:
    """Copies one file in chunks with pauses; False if it stopped after ``stop_after_bytes``."""
    data = source.read_bytes()
    chunk = max(1, -(-len(data) // CHUNKS_PER_FILE))
    with open(target, "wb") as file:
        for start in range(0, len(data), chunk):
            if stop_after_bytes is not None and start >= stop_after_bytes:
                return False
            file.write(data[start : start + chunk])
            file.flush()
            time.sleep(pause_s)  # a slow disk or network: the writer's pace, not a wait
    shutil.copystat(source, target)
    return True


def slow_cp_r(source: Path, base: Path, version: int) -> None:
    """``cp -r``: the directory appears at once and fills file by file, each slowly."""
    copy_slowly(source, base / str(version))


def copy_slowly(source: Path, target: Path, *, die_after_bytes: int | None = None) -> None:
    """Copies ``source`` into ``target`` like a slow ``cp -r``; with ``die_after_bytes`` the
    writer dies once that much of its biggest file is written."""
    biggest = max(_files(source), key=lambda p: p.stat().st_size)
    for file in _files(source):
        destination = target / file.relative_to(source)
        destination.parent.mkdir(parents=True, exist_ok=True)
        limit = die_after_bytes if file == biggest else None
        if not _write_slowly(file, destination, stop_after_bytes=limit):
            return


def rsync(source: Path, base: Path, version: int, *, pause_s: float = CHUNK_PAUSE_S) -> None:
    """rsync's way: each file written to a hidden temp file beside it, then renamed."""
    target = base / str(version)
    for file in _files(source):
        destination = target / file.relative_to(source)
        destination.parent.mkdir(parents=True, exist_ok=True)
        temporary = destination.parent / f".{destination.name}.{os.getpid()}"
        _write_slowly(file, temporary, pause_s=pause_s)
        os.rename(temporary, destination)


def tar_x(source: Path, base: Path, version: int) -> None:
    """``tar -x`` of an archive holding ``<version>/...`` (mtimes restored from the archive)."""
    with tempfile.TemporaryDirectory() as scratch:
        archive = Path(scratch) / "model.tar"
        with tarfile.open(archive, "w") as tar:
            tar.add(source, arcname=str(version))
        subprocess.run(["tar", "-xf", str(archive), "-C", str(base)], check=True)


def write_then_mv(source: Path, base: Path, version: int) -> None:
    """Written slowly beside the base path, then moved into place with ``mv``."""
    staging = base.parent / f".{base.name}-{version}.staging"
    copy_slowly(source, staging)
    subprocess.run(["mv", str(staging), str(base / str(version))], check=True)


PUBLISHERS: dict[str, Publisher] = {
    "cp -r": slow_cp_r,
    "rsync": rsync,
    "tar -x": tar_x,
    "write then mv": write_then_mv,
}

PYTHON_MODEL = """
from pathlib import Path

import numpy as np

from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

WEIGHTS_BYTES = {weights_bytes}


class Model(PythonModel):
    def load(self, path):
        data = (Path(path) / "weights.bin").read_bytes()
        if len(data) != WEIGHTS_BYTES:
            raise ValueError(f"weights.bin holds {{len(data)}} of {{WEIGHTS_BYTES}} bytes")
        self.factor = float(np.frombuffer(data[:8], np.float64)[0])

    @signature(
        name="serving_default",
        inputs=[TensorSpec("x", "float32", [-1])],
        outputs=[TensorSpec("y", "float32", [-1])],
    )
    def predict(self, x):
        return {{"y": x * self.factor}}
"""


def write_python_model(path: Path, factor: float, weights_bytes: int) -> Path:
    """A Python model version answering ``y = factor * x``, with a ``weights.bin`` it checks."""
    path.mkdir(parents=True)
    weights = np.zeros(weights_bytes // 8, np.float64)
    weights[0] = factor
    (path / "weights.bin").write_bytes(weights.tobytes())
    (path / "model.py").write_text(
        textwrap.dedent(PYTHON_MODEL.format(weights_bytes=weights_bytes))
    )
    return path


def write_saved_model(path: Path, factor: float, weights_bytes: int) -> Path:
    """A SavedModel answering ``y = factor * x`` whose variables take about ``weights_bytes``."""
    import tensorflow as tf

    class Scaler(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.factor = tf.Variable(factor, dtype=tf.float32)
            self.ballast = tf.Variable(tf.zeros([max(1, weights_bytes // 4)], tf.float32))

        # No autograph: it cannot always find the source of a class defined in a function.
        @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")], autograph=False)
        def predict(self, x: tf.Tensor) -> dict[str, tf.Tensor]:
            return {"y": x * self.factor}

    module = Scaler()
    tf.saved_model.save(module, str(path), signatures={"serving_default": module.predict})
    return path
