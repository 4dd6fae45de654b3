"""Benchmark: a SavedModel signature called through servinglib, against calling TF directly.

Loads the shipped ``half_plus_two`` (version 1) and a Keras MLP (input 256 → Dense 256 x3,
exported with ``model.export()``) with SavedModelLoader, and measures per call, at batch 1
and 64:

1. ``call_signature(servable, ...)``: what front ends run (checks the request against the
   signature, converts numpy → tensors, runs the concrete function, converts the outputs
   back); ``servable.call(...)`` alone (without the checks); and two floors: the same
   concrete function called directly with numpy in and out (``tf.constant`` per input,
   ``.numpy()`` per output, the same work done by hand) and with prebuilt tensors, its
   outputs left as tensors; and ``call_signature`` of the same version loaded in a model
   process (``ProcessLoader``: each call crosses a socket to it and back);
2. load time: SavedModelLoader.load() (reads saved_model.pb, loads, warms up) against a bare
   ``tf.saved_model.load`` of the same directory, and unload (which runs a full gc).

Series are interleaved in rounds so drift on a shared machine hits them alike; figures are
µs per call (ms for loads), and ratios of p50s within this run.
Prints one table and a PASS/MISS line per target; never fails on a MISS.
Run with ``./dev bench loaders_call`` (see bench/README.md); ``--profile`` adds a cProfile
of call_signature on half_plus_two at batch 1.
"""

from __future__ import annotations

import argparse
import cProfile
import dataclasses
import gc
import io
import os
import pstats
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # what servinglib sets when it imports TF

import keras
import numpy as np
import tensorflow as tf
from _common import PercentileTable, percentile, print_environment, print_target

from servinglib.examples import HALF_PLUS_TWO
from servinglib.loaders.process import ProcessLoader
from servinglib.loaders.tensorflow import (
    SavedModelLoader,
    TensorFlowPlatformConfig,
    TensorFlowServable,
)
from servinglib.servable import call_signature

BATCHES = (1, 64)
SIGNATURE = "serving_default"
PROCESS_FACTORY = "servinglib.loaders.tensorflow.saved_model_loader:SavedModelLoader"

# Target (from the issue): call_signature over the direct numpy call, at batch 1.
OVERHEAD_TARGET = 1.10

Call = Callable[[], object]


@dataclasses.dataclass(frozen=True)
class Model:
    """A loaded model and what each series calls it with."""

    label: str
    path: str
    loader: SavedModelLoader
    servable: TensorFlowServable
    function: Any  # the signature's concrete function
    input_name: str
    make_input: Callable[[int], np.ndarray]
    process_loader: ProcessLoader  # the same version in a model process


def build_keras_mlp(path: str) -> None:
    """Input 256 → Dense 256 relu → Dense 256 relu → Dense 256, exported with model.export()."""
    keras.utils.set_random_seed(1)
    features = keras.Input((256,), name="features")
    hidden = keras.layers.Dense(256, activation="relu")(features)
    hidden = keras.layers.Dense(256, activation="relu")(hidden)
    model = keras.Model(features, keras.layers.Dense(256)(hidden))
    model.export(path, verbose=False)


def load_model(
    label: str, path: str, input_name: str, make_input: Callable[[int], np.ndarray]
) -> Model:
    loader = SavedModelLoader(path)
    loader.load()
    servable = loader.servable()
    assert isinstance(servable, TensorFlowServable)
    function = servable.model.signatures[SIGNATURE]
    in_process = ProcessLoader(path, PROCESS_FACTORY, TensorFlowPlatformConfig())
    in_process.load()
    return Model(label, path, loader, servable, function, input_name, make_input, in_process)


# --------------------------------------------------------------------------- calls


def series(model: Model, batch: int) -> dict[str, Call]:
    """The four ways of running one call, each a no-argument closure (built once)."""
    name = model.input_name
    array = model.make_input(batch)
    inputs = {name: array}
    tensors = {name: tf.constant(array)}
    servable, function = model.servable, model.function
    process_servable = model.process_loader.servable()

    def through_call_signature() -> object:
        return call_signature(servable, SIGNATURE, inputs)

    def through_servable_call() -> object:
        return servable.call(SIGNATURE, inputs)

    def direct_numpy() -> object:
        results = function(**{key: tf.constant(value) for key, value in inputs.items()})
        return {key: value.numpy() for key, value in results.items()}

    def direct_tensors() -> object:
        return function(**tensors)

    def through_model_process() -> object:
        return call_signature(process_servable, SIGNATURE, inputs)

    return {
        "call_signature (numpy in/out)": through_call_signature,
        "servable.call (no checks)": through_servable_call,
        "floor: function, numpy in/out": direct_numpy,
        "floor: function, tensors in/out": direct_tensors,
        "call_signature, model process": through_model_process,
    }


def measure_calls(calls: dict[str, Call], rounds: int, per_round: int) -> dict[str, list[float]]:
    """µs of each call timed alone, the series interleaved round by round."""
    clock = time.perf_counter_ns
    samples: dict[str, list[float]] = {label: [] for label in calls}
    for call in calls.values():  # warm-up (first calls trace and allocate)
        for _ in range(20):
            call()
    for _ in range(rounds):
        for label, call in calls.items():
            out = samples[label]
            for _ in range(per_round):
                start = clock()
                call()
                out.append((clock() - start) / 1000)
    return samples


@dataclasses.dataclass(frozen=True)
class LoadTimes:
    """ms of each load / unload."""

    loader_first_ms: float
    loader_ms: list[float]
    bare_ms: list[float]
    unload_ms: list[float]


def measure_loads(path: str, loads: int) -> LoadTimes:
    """SavedModelLoader.load / unload against bare tf.saved_model.load, alternating."""
    loader_ms, bare_ms, unload_ms = [], [], []
    first = -1.0
    for i in range(loads + 1):
        loader = SavedModelLoader(path)
        start = time.perf_counter()
        loader.load()
        took = (time.perf_counter() - start) * 1000
        start = time.perf_counter()
        loader.unload()
        unloaded = (time.perf_counter() - start) * 1000
        start = time.perf_counter()
        tf.saved_model.load(path)
        bare = (time.perf_counter() - start) * 1000
        gc.collect()
        if i == 0:
            first = took
            continue
        loader_ms.append(took)
        unload_ms.append(unloaded)
        bare_ms.append(bare)
    return LoadTimes(first, loader_ms, bare_ms, unload_ms)


def profile_calls(call: Call, calls: int) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        call()
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(14)
    return text.getvalue().strip("\n")


# --------------------------------------------------------------------------- report

LABEL_WIDTH = 44
TABLE = PercentileTable(LABEL_WIDTH, ("p50", "p90", "p99", "min"))
LOAD_TABLE = PercentileTable(LABEL_WIDTH, ("p50", "min", "max"))


def print_calls(model: Model, batch: int, samples: dict[str, list[float]]) -> float:
    """Prints one model-and-batch block; returns call_signature's p50 over the numpy floor's."""
    p50 = {label: percentile(sorted(values), 0.5) for label, values in samples.items()}
    ours = p50["call_signature (numpy in/out)"]
    call_only = p50["servable.call (no checks)"]
    numpy_floor = p50["floor: function, numpy in/out"]
    tensor_floor = p50["floor: function, tensors in/out"]
    process = p50["call_signature, model process"]
    print(f"   {model.label}, batch {batch}")
    for label, values in samples.items():
        print(TABLE.row(f"  {label}", values))
    print(
        f"     ratios of p50: call_signature / numpy floor {ours / numpy_floor:.3f}x "
        f"({ours - numpy_floor:+.1f} µs); checks {ours - call_only:+.1f} µs; "
        f"numpy floor / tensor floor {numpy_floor / tensor_floor:.2f}x; model process "
        f"{process / ours:.2f}x ({process - ours:+.1f} µs)"
    )
    return ours / numpy_floor


def print_loads(label: str, times: LoadTimes) -> None:
    print(f"   {label}: first SavedModelLoader.load in this process {times.loader_first_ms:.1f} ms")
    print(LOAD_TABLE.row("  SavedModelLoader.load", times.loader_ms))
    print(LOAD_TABLE.row("  floor: tf.saved_model.load", times.bare_ms))
    print(LOAD_TABLE.row("  SavedModelLoader.unload (full gc)", times.unload_ms))
    ratio = statistics.median(times.loader_ms) / statistics.median(times.bare_ms)
    print(f"     ratio of p50s: load / floor {ratio:.2f}x")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=10, help="interleaved rounds per block")
    parser.add_argument("--calls", type=int, default=200, help="calls per series per round")
    parser.add_argument("--loads", type=int, default=10, help="timed loads per model")
    parser.add_argument("--profile", action="store_true", help="cProfile of call_signature")
    args = parser.parse_args(argv)

    began = time.perf_counter()
    print_environment(
        "loaders_call: SavedModel signature calls through servinglib vs. the concrete function"
    )
    print(
        f"tensorflow {tf.__version__}, keras {keras.__version__}, "
        f"TF_ENABLE_ONEDNN_OPTS={os.environ.get('TF_ENABLE_ONEDNN_OPTS', 'unset')}"
    )
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as scratch:
        mlp_path = os.path.join(scratch, "mlp", "1")
        build_keras_mlp(mlp_path)
        models = [
            load_model(
                "half_plus_two v1 (x float [-1])",
                str(Path(HALF_PLUS_TWO) / "1"),
                "x",
                lambda n: rng.normal(size=n).astype(np.float32),
            ),
            load_model(
                "Keras MLP 256 → Dense256 x3",
                mlp_path,
                "features",
                lambda n: rng.normal(size=(n, 256)).astype(np.float32),
            ),
        ]
        print()
        print(
            f"1. µs per call, each timed alone; {args.rounds} interleaved rounds of "
            f"{args.calls} calls per series"
        )
        print(TABLE.header())
        ratios: dict[tuple[str, int], float] = {}
        for model in models:
            for batch in BATCHES:
                gc.collect()
                samples = measure_calls(series(model, batch), args.rounds, args.calls)
                ratios[model.label, batch] = print_calls(model, batch, samples)

        print()
        print(f"2. load and unload, ms ({args.loads} loads per model after a first one)")
        print(LOAD_TABLE.header())
        for label, path in [
            ("half_plus_two v1", str(Path(HALF_PLUS_TWO) / "1")),
            ("half_plus_two v2 (1 warmup record)", str(Path(HALF_PLUS_TWO) / "2")),
            ("Keras MLP", mlp_path),
        ]:
            print_loads(label, measure_loads(path, args.loads))

        if args.profile:
            print()
            print("profile: call_signature, half_plus_two batch 1, 3000 calls (cProfile)")
            calls = series(models[0], 1)
            print(profile_calls(calls["call_signature (numpy in/out)"], 3000))
        for model in models:
            model.loader.unload()
            model.process_loader.unload()

    print()
    print(f"took {time.perf_counter() - began:.1f} s")
    for model in models:
        ratio = ratios[model.label, 1]
        print_target(
            ratio <= OVERHEAD_TARGET,
            f"per-call overhead at batch 1 <= {OVERHEAD_TARGET - 1:.0%} "
            f"({model.label}): call_signature / direct numpy call = {ratio:.3f}x",
        )


if __name__ == "__main__":
    main()
