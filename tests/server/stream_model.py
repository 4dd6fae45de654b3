"""A Python model with streaming signatures, shared by the plane, gRPC and REST streaming tests."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from servinglib.examples import PYTHON_HALF_PLUS_TWO
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.model_spec import ModelSpec
from servinglib.server.server_core import ServerCore
from servinglib.testing import write_python_model

MODEL_PY = '''
import asyncio
import threading
from pathlib import Path
import numpy as np
from servinglib.loaders import PythonModel, signature
from servinglib.servable import ExecutionMode, TensorSpec

IN = [TensorSpec("n", "int32", [1]), TensorSpec("tag", object, [1])]
OUT = [TensorSpec("i", "int32", [1]), TensorSpec("text_output", object, [1])]


def part(k):
    return {"i": np.array([k], np.int32), "text_output": np.array([b"t%d " % k], dtype=object)}


class Model(PythonModel):
    """Streams abs(n) parts; a negative n fails after them.  Records what it made and closed."""

    def load(self, path):
        self.lock = threading.Lock()
        self.produced = {}
        self.closed = []
        self.log = Path(path) / "closed.log"

    def _closed(self, tag):
        self.closed.append(tag)
        with self.lock, self.log.open("a") as log:
            log.write(tag + "\\n")

    def _made(self, tag):
        with self.lock:
            self.produced[tag] = self.produced.get(tag, 0) + 1

    @signature(name="serving_default", inputs=IN, outputs=OUT)
    def count(self, n, tag):
        key = tag[0].decode()
        try:
            for k in range(abs(int(n[0]))):
                self._made(key)
                yield part(k)
            if n[0] < 0:
                raise ValueError(f"failed after {-int(n[0])} parts")
        finally:
            self._closed(key)

    @signature(inputs=IN, outputs=OUT, execution_mode=ExecutionMode.INLINE)
    def inline_count(self, n, tag):
        yield from self.count(n, tag)

    @signature(inputs=IN, outputs=OUT, execution_mode=ExecutionMode.ASYNC)
    async def async_count(self, n, tag):
        key = tag[0].decode()
        try:
            for k in range(abs(int(n[0]))):
                await asyncio.sleep(0)
                self._made(key)
                yield part(k)
            if n[0] < 0:
                raise ValueError(f"failed after {-int(n[0])} parts")
        finally:
            self._closed(key)

    @signature(inputs=IN, outputs=OUT)
    def whole(self, n, tag):
        return {"i": n, "text_output": np.array([b"whole"], dtype=object)}
'''

ENDLESS = 2**31 - 1
"""An ``n`` no test reads to its end."""
SPEC = ModelSpec.latest("stream")


def write_stream_model(root: Path) -> ModelServerConfig:
    """Writes the model as ``root/stream/1/model.py``; a config serving it as "stream".

    The config also serves the bundled ``python_half_plus_two``, a model that does not stream.
    """
    return ModelServerConfig(
        [
            ModelConfig.python("stream", write_python_model(root, "stream", MODEL_PY)),
            ModelConfig("python_half_plus_two", PYTHON_HALF_PLUS_TWO, "python"),
        ]
    )


def closed_tags(root: Path) -> list[str]:
    """The tags of the streams whose generator's ``finally`` ran, in order (from its log file)."""
    log = root / "stream" / "1" / "closed.log"
    return log.read_text().split() if log.exists() else []


@contextmanager
def model_of(core: ServerCore) -> Iterator[Any]:
    """The loaded PythonModel (to read what it produced and closed)."""
    with core.servable_handle(SPEC) as handle:
        yield handle.servable.model
