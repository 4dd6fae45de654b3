"""What shadowing 100 % of calls to an identical version costs the primary's p99, in process.

One DataPlane over a Python model with two identical versions (a ``thread`` signature computing
for about 1 ms: a [64, 64] float32 matrix product repeated): 8 client threads call version 1
through ``infer_blocking`` (a traffic rule's weights send every call there) for a fixed number
of calls each, first with no shadow, then with version 2 shadowing every call. Prints the p50
and p99 of both runs, the shadow's counts, and p99(shadowed) / p99(off) (target <= 1.1 on two
cores: the copies run on one background thread and drop when its queue is full).
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
from servinglib.server.traffic_rule import ShadowRule, TrafficRule
from servinglib.sources.version_policy import ServableVersionPolicy
from servinglib.testing import wait_until, write_python_model

MODEL_PY = textwrap.dedent(
    """
    import numpy as np
    from servinglib.loaders import PythonModel, signature
    from servinglib.servable import TensorSpec

    class Model(PythonModel):
        @signature(name="serving_default", inputs=[TensorSpec("x", "float32", [64, 64])],
                   outputs=[TensorSpec("y", "float32", [64, 64])])
        def predict(self, x):
            y = x
            for _ in range(20):
                y = np.tanh(y @ x)
            return {"y": y}
    """
)
THREADS = 8
CALLS_PER_THREAD = 400
X = {"x": np.random.default_rng(0).random((64, 64), np.float32) / 64}


def run(plane: DataPlane) -> list[float]:
    """Every call's latency in seconds, THREADS threads at once."""
    spec = ModelSpec.latest("m")

    def one_thread() -> list[float]:
        latencies = []
        for _ in range(CALLS_PER_THREAD):
            started = time.perf_counter()
            plane.infer_blocking(spec, None, X)
            latencies.append(time.perf_counter() - started)
        return latencies

    with concurrent.futures.ThreadPoolExecutor(THREADS) as pool:
        results = list(pool.map(lambda _: one_thread(), range(THREADS)))
    return [latency for thread in results for latency in thread]


def p99(latencies: list[float]) -> float:
    return statistics.quantiles(latencies, n=100)[98]


def main() -> None:
    print_environment("shadow: a 100 % shadow of an identical version against the primary's p99")
    with tempfile.TemporaryDirectory() as tmp:
        for version in (1, 2):
            write_python_model(tmp, "m", MODEL_PY, version=version)
        options = ServerCoreOptions(
            platform_configs={"python": PythonPlatformConfig(allow_code_execution=True)}
        )

        def config(traffic: TrafficRule) -> ModelServerConfig:
            policy = ServableVersionPolicy.specific([1, 2])
            return ModelServerConfig(
                [ModelConfig("m", Path(tmp, "m"), "python", policy, traffic=traffic)]
            )

        off = TrafficRule.split({1: 1})
        on = TrafficRule(weights={1: 1}, shadow=ShadowRule(version=2))
        with ServerCore(config(off), options) as core:
            wait_until(lambda: len(core.manager.list_available_servable_ids()) == 2, 60)
            plane = DataPlane(core)
            try:
                run(plane)  # warm up
                baseline = run(plane)
                core.reload_config(config(on))
                shadowed = run(plane)
                wait_until(lambda: _settled(plane), 60)
                counts = plane.shadow_usage().outcomes
            finally:
                plane.close()
    for name, latencies in (("no shadow", baseline), ("shadow 100 %", shadowed)):
        print(
            f"{name:>14}: p50 {statistics.median(latencies) * 1e3:7.3f} ms  "
            f"p99 {p99(latencies) * 1e3:7.3f} ms"
        )
    print(f"shadow copies: {dict(sorted((o, n) for (_, o), n in counts.items()))}")
    print(f"p99 ratio (shadowed / off): {p99(shadowed) / p99(baseline):.3f}")


def _settled(plane: DataPlane) -> bool:
    outcomes = plane.shadow_usage().outcomes
    return sum(outcomes.values()) == THREADS * CALLS_PER_THREAD


if __name__ == "__main__":
    sys.exit(main())
