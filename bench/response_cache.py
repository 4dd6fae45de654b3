"""What a response-cache hit costs against a model call of 1 ms, in process.

One DataPlane over a Python model whose call sleeps 1 ms (a ``thread`` signature, as most
models), with a 64 MiB response cache: the same [1, 16] float32 request through
``infer_blocking`` answered by the model (its signature uncached) and from the cache (every call
after the first a hit). Latency is the median of single calls; req/s runs 8 threads at once.
"""

from __future__ import annotations

import concurrent.futures
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np
from _common import print_environment

from servinglib.loaders import PythonPlatformConfig
from servinglib.server import ServerCore, ServerCoreOptions
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.model_spec import ModelSpec
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.plane.response_cache_config import ResponseCacheConfig

MODEL_PY = textwrap.dedent(
    """
    import time
    from servinglib.loaders import PythonModel, signature
    from servinglib.servable import TensorSpec

    X = [TensorSpec("x", "float32", [-1, 16])]
    Y = [TensorSpec("y", "float32", [-1, 16])]

    class Model(PythonModel):
        @signature(inputs=X, outputs=Y, response_cache=True)
        def cached(self, x):
            time.sleep(0.001)
            return {"y": x + 1}

        @signature(inputs=X, outputs=Y)
        def uncached(self, x):
            time.sleep(0.001)
            return {"y": x + 1}
    """
)
SPEC = ModelSpec.latest("m")
X = {"x": np.ones((1, 16), np.float32)}
CALLS = 2000
THREADS = 8


def latency_us(plane: DataPlane, signature: str) -> float:
    times = []
    for _ in range(CALLS // 4):
        started = time.perf_counter()
        plane.infer_blocking(SPEC, signature, X)
        times.append(time.perf_counter() - started)
    return statistics.median(times) * 1e6


def requests_per_s(plane: DataPlane, signature: str) -> float:
    def run(_: int) -> None:
        for _ in range(CALLS // THREADS):
            plane.infer_blocking(SPEC, signature, X)

    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        list(pool.map(run, range(THREADS)))
    return (CALLS // THREADS) * THREADS / (time.perf_counter() - started)


def main() -> None:
    print_environment("Response cache: a hit against a model call of 1 ms, in process")
    with tempfile.TemporaryDirectory() as root:
        version = Path(root) / "m" / "1"
        version.mkdir(parents=True)
        (version / "model.py").write_text(MODEL_PY)
        options = ServerCoreOptions(
            platform_configs={"python": PythonPlatformConfig(allow_code_execution=True)}
        )
        config = ModelServerConfig([ModelConfig.python("m", version.parent)])
        with ServerCore(config, options) as core:
            plane = DataPlane(core, response_cache=ResponseCacheConfig(64 << 20))
            try:
                plane.infer_blocking(SPEC, "cached", X)  # the one miss
                for name, signature in (("model call (1 ms)", "uncached"), ("cache hit", "cached")):
                    p50 = latency_us(plane, signature)
                    rate = requests_per_s(plane, signature)
                    print(f"{name:18} p50 {p50:8.1f} µs   c={THREADS}: {rate:9.0f} req/s")
            finally:
                plane.close()
    sys.stdout.flush()


if __name__ == "__main__":
    main()
