"""What shadowing 100 % of calls to an identical version costs the primary's p99, in process.

One DataPlane over a Python model with two identical versions (a ``thread`` signature computing
for about 1 ms: a [64, 64] float32 matrix product repeated): 8 client threads call version 1
through ``infer_blocking`` (a traffic rule's weights send every call there) for a fixed number
of calls each: with no shadow (``off``), with version 2 shadowing every call the way it did
before issue 38's fix (``eager``: each copy runs at once on the shadow thread) and the way it
does now (``idle``: a copy waits for its model to have no request in flight, or is dropped).
The three alternate for ``--rounds`` rounds, so the machine's noise falls on each alike. Prints
each arm's pooled p50 and p99, its shadow counts and p99(arm) / p99(off) (target <= 1.1 on two
cores).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import functools
import statistics
import sys
import tempfile
import textwrap
import time
from collections import Counter
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


ARMS = ("off", "eager", "idle")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the three arms")
    args = parser.parse_args()
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
            latencies: dict[str, list[float]] = {arm: [] for arm in ARMS}
            counts: dict[str, Counter[str]] = {arm: Counter() for arm in ARMS}
            run(DataPlane(core))  # warm up
            for _ in range(args.rounds):
                for arm in ARMS:
                    core.reload_config(config(off if arm == "off" else on))
                    plane = DataPlane(core)
                    if arm == "eager":  # the shadowing of before: no look at the in-flight count
                        plane._shadowing._in_flight = None  # noqa: SLF001 - the old behaviour
                    try:
                        latencies[arm] += run(plane)
                        wait_until(functools.partial(_settled, plane, arm), 120)
                        for (_, outcome), n in plane.shadow_usage().outcomes.items():
                            counts[arm][outcome] += n
                    finally:
                        plane.close()
    for arm in ARMS:
        print(
            f"{arm:>6}: p50 {statistics.median(latencies[arm]) * 1e3:7.3f} ms  "
            f"p99 {p99(latencies[arm]) * 1e3:7.3f} ms  "
            f"p99 / off {p99(latencies[arm]) / p99(latencies['off']):.3f}  "
            f"copies {dict(sorted(counts[arm].items()))}"
        )


def _settled(plane: DataPlane, arm: str) -> bool:
    copies = sum(plane.shadow_usage().outcomes.values())
    return copies == (0 if arm == "off" else THREADS * CALLS_PER_THREAD)


if __name__ == "__main__":
    sys.exit(main())
