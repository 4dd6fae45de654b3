"""Benchmark: ServerCore serving 1,000 small Python-servable models.

Writes 1,000 model directories (``model-0000/1/model.py`` ..., a signature adding 1 to its
input; byte-compiled ahead, so that no start pays for compiling), 10 more for a small core and
those of the models the reloads add, in a temp dir, and measures, on cores with
``file_system_poll_wait_seconds`` = 3600 (so no periodic poll runs; filesystem events are
watched, one watchdog emitter thread per base path):

1. the time ``ServerCore(config, options)`` takes to start all 1,000 models, with
   ``num_initial_load_threads`` at its default (4 x CPUs) and at 0 (the steady pool: loads
   run on the manager's thread), and, to show what the watches cost, at the default without
   watching (poll wait 0: one poll, no thread, no watches);
2. the RSS each model adds (RSS after the first start minus before it, over 1,000), the
   threads alive and the inotify instances and watches;
3. ``reload_config`` adding one model to the 1,000 (it returns once the new model is
   available), against the same on a core with 10 models; and the reload removing it again;
4. taking and releasing a handle, ``servable_handle(ModelSpec.latest(name))``, rotating over
   the 1,000 names, against 10 names, beside a floor: the manager's own
   ``servable_handle(ServableRequest.latest(name))`` on the 1,000-model core.

Prints one table per section and a PASS/MISS line per target; never fails on a MISS.
Run with ``./dev bench server_core_scale`` (see bench/README.md); ``--profile`` adds a cProfile
of ``reload_config`` adding one model to the 1,000, and ``--load-ms 5`` makes every model's
``load()`` sleep 5 ms (as blocking I/O would, GIL released), which load threads can overlap.
"""

from __future__ import annotations

import argparse
import compileall
import cProfile
import dataclasses
import gc
import io
import math
import os
import pstats
import statistics
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import attrs
from _common import INDENT, PercentileTable, percentile, print_environment, print_target

from servinglib import FileSystemStoragePathSourceConfig, ServableRequest
from servinglib.loaders import PythonPlatformConfig
from servinglib.server import (
    ModelConfig,
    ModelServerConfig,
    ModelSpec,
    ServerCore,
    ServerCoreOptions,
)

NUM_MODELS = 1000
NUM_SMALL = 10  # the comparison core
POLL_WAIT_S = 3600.0  # no periodic full poll during the run: only filesystem events
WAIT_S = 120.0  # bound on any start or reload; hitting it means the library is broken
BATCH = 100  # handle lookups per timed batch

MODEL_PY = """\
\"\"\"A tiny Python model for the benchmark: y = x + 1; load() sleeps {load_s} s.\"\"\"

import time

import numpy as np

from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

LOAD_S = {load_s}  # stands for reading weights: blocking I/O, with the GIL released


class Model(PythonModel):
    def load(self, path: str) -> None:
        if LOAD_S:
            time.sleep(LOAD_S)

    @signature(
        name="serving_default",
        inputs=[TensorSpec("x", "float32", [-1])],
        outputs=[TensorSpec("y", "float32", [-1])],
    )
    def predict(self, x: np.ndarray) -> dict[str, np.ndarray]:
        return {{"y": x + 1}}
"""

# Targets. The issue: reload_config adding one model does no work proportional to the
# unchanged models beyond a diff, so it costs about what it costs beside 10 models; and a
# handle lookup does not depend on how many models are served.
RELOAD_RATIO_TARGET = 2.0
LOOKUP_RATIO_TARGET = 1.25


@dataclasses.dataclass(frozen=True)
class Row:
    """Samples of one measured series (ms, or µs for lookups)."""

    label: str
    samples: Sequence[float]

    def pct(self, q: float) -> float:
        return percentile(sorted(self.samples), q)


# --------------------------------------------------------------------------- set-up


def model_names(prefix: str, count: int) -> list[str]:
    return [f"{prefix}-{i:04d}" for i in range(count)]


def write_models(root: Path, names: Sequence[str], load_s: float) -> None:
    """Version 1 of each model, byte-compiled so that no start pays for compiling."""
    for name in names:
        version = root / name / "1"
        version.mkdir(parents=True)
        (version / "model.py").write_text(MODEL_PY.format(load_s=load_s))
    compileall.compile_dir(str(root), quiet=1)


def server_config(root: Path, names: Sequence[str]) -> ModelServerConfig:
    return ModelServerConfig(tuple(ModelConfig.python(name, root / name) for name in names))


def core_options(*, poll_wait_s: float = POLL_WAIT_S) -> ServerCoreOptions:
    """The benchmark's options: Python models allowed, no periodic poll, bounded waits."""
    return ServerCoreOptions(
        platform_configs={"python": PythonPlatformConfig(allow_code_execution=True)},
        source=FileSystemStoragePathSourceConfig(file_system_poll_wait_seconds=poll_wait_s),
        servable_state_waiter_timeout_s=WAIT_S,
    )


def rss_bytes() -> int:
    """Resident set size of this process, from /proc/self/statm."""
    resident_pages = int(Path("/proc/self/statm").read_text().split()[1])
    return resident_pages * os.sysconf("SC_PAGE_SIZE")


def inotify_usage() -> tuple[int, int]:
    """(inotify instances, watches) this process holds, from /proc/self/fd and fdinfo."""
    instances = watches = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}") != "anon_inode:inotify":
                continue
            info = Path(f"/proc/self/fdinfo/{fd}").read_text().splitlines()
        except OSError:  # closed meanwhile, or the listing's own fd
            continue
        instances += 1
        watches += sum(1 for line in info if line.startswith("inotify wd:"))
    return instances, watches


# --------------------------------------------------------------------------- 1. and 2. start


@dataclasses.dataclass(frozen=True)
class StartKind:
    """One way of starting the 1,000 models."""

    label: str
    options: ServerCoreOptions


def start_kinds() -> list[StartKind]:
    default_threads = ServerCoreOptions().num_initial_load_threads
    return [
        StartKind(
            f"num_initial_load_threads = default ({default_threads})",
            core_options(),
        ),
        StartKind(
            "num_initial_load_threads = 0 (steady pool)",
            attrs.evolve(core_options(), num_initial_load_threads=0),
        ),
        StartKind(
            f"default ({default_threads}), no watches (poll wait 0)",
            core_options(poll_wait_s=0.0),
        ),
    ]


def timed_start(config: ModelServerConfig, options: ServerCoreOptions) -> tuple[ServerCore, float]:
    """A started core and the seconds its constructor took."""
    gc.collect()
    began = time.perf_counter()
    core = ServerCore(config, options)
    elapsed = time.perf_counter() - began
    if not core.ready() or len(core.manager.list_available_servable_ids()) != len(config.models):
        core.close()
        raise RuntimeError(f"start: not every model is available ({core.failed_models()})")
    return core, elapsed


@dataclasses.dataclass(frozen=True)
class Footprint:
    """What the first 1,000-model core added to the process."""

    rss_per_model_bytes: float
    threads_before: int
    threads_after: int
    inotify: tuple[int, int]


# --------------------------------------------------------------------------- 3. reload


@dataclasses.dataclass
class ReloadSeries:
    """ms of reload_config adding one model, and of the reload removing it again."""

    add_ms: list[float] = dataclasses.field(default_factory=list)
    remove_ms: list[float] = dataclasses.field(default_factory=list)


def timed_reload(core: ServerCore, config: ModelServerConfig) -> float:
    began = time.perf_counter()
    core.reload_config(config)
    return (time.perf_counter() - began) * 1000


def add_and_remove(
    core: ServerCore, base: ModelServerConfig, extra: ModelConfig
) -> tuple[float, float]:
    """ms of reloading ``base`` + ``extra`` (returns once it serves), then ``base`` again."""
    bigger = base.with_model(extra)  # built outside the timing: the caller's work
    gc.collect()
    added_ms = timed_reload(core, bigger)
    with core.servable_handle(ModelSpec.latest(extra.name)):
        pass
    removed_ms = timed_reload(core, base)
    return added_ms, removed_ms


def measure_reloads(
    big: ServerCore,
    small: ServerCore,
    big_extras: Sequence[ModelConfig],
    small_extras: Sequence[ModelConfig],
) -> tuple[ReloadSeries, ReloadSeries]:
    """Alternates the two cores; each reload adds a model that core never served before.

    (Re-adding a model just removed can race with its old END state and fail spuriously.)
    """
    big_series, small_series = ReloadSeries(), ReloadSeries()
    for big_extra, small_extra in zip(big_extras, small_extras, strict=True):
        for core, series, extra in (
            (big, big_series, big_extra),
            (small, small_series, small_extra),
        ):
            added, removed = add_and_remove(core, core.config, extra)
            series.add_ms.append(added)
            series.remove_ms.append(removed)
    return big_series, small_series


def profile_reload(core: ServerCore, extra: ModelConfig) -> str:
    """cProfile of reload_config adding ``extra`` (it sees the calling thread only)."""
    base = core.config
    bigger = base.with_model(extra)
    profiler = cProfile.Profile()
    profiler.enable()
    core.reload_config(bigger)
    profiler.disable()
    core.reload_config(base)
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("cumulative").print_stats(18)
    return text.getvalue().strip("\n")


# --------------------------------------------------------------------------- 4. lookups
#
# Each workload is written out rather than parametrised, so the timed loop holds exactly the
# user's code and nothing of the harness.

T = TypeVar("T")
Workload = Callable[[ServerCore, Sequence[T], "list[int] | None"], None]
"""One batch of BATCH lookups; appends each op's ns to the list if one is given."""


def spec_prebuilt(core: ServerCore, batch: Sequence[ModelSpec], out: list[int] | None) -> None:
    if out is None:
        for spec in batch:
            with core.servable_handle(spec):
                pass
        return
    clock = time.perf_counter_ns
    for spec in batch:
        start = clock()
        with core.servable_handle(spec):
            pass
        out.append(clock() - start)


def spec_built(core: ServerCore, batch: Sequence[str], out: list[int] | None) -> None:
    if out is None:
        for name in batch:
            with core.servable_handle(ModelSpec.latest(name)):
                pass
        return
    clock = time.perf_counter_ns
    for name in batch:
        start = clock()
        with core.servable_handle(ModelSpec.latest(name)):
            pass
        out.append(clock() - start)


def floor_manager(
    core: ServerCore, batch: Sequence[ServableRequest], out: list[int] | None
) -> None:
    """Floor: the core's manager asked directly, with prebuilt requests."""
    manager = core.manager
    if out is None:
        for request in batch:
            with manager.servable_handle(request):
                pass
        return
    clock = time.perf_counter_ns
    for request in batch:
        start = clock()
        with manager.servable_handle(request):
            pass
        out.append(clock() - start)


def rotating_batches(items: Sequence[T]) -> list[Sequence[T]]:
    """``items`` repeated in order and cut into batches of BATCH: one pass covers every item."""
    ring = list(items) * (math.lcm(len(items), BATCH) // len(items))
    return [ring[i : i + BATCH] for i in range(0, len(ring), BATCH)]


def measure_batched(
    workload: Workload[T], core: ServerCore, batches: Sequence[Sequence[T]], count: int
) -> list[float]:
    """Per-op µs of ``count`` batches (batch time / BATCH), cycling through ``batches``."""
    for batch in batches:  # warm-up
        workload(core, batch, None)
    gc.collect()
    clock = time.perf_counter_ns
    out = []
    for index in range(count):
        batch = batches[index % len(batches)]
        start = clock()
        workload(core, batch, None)
        out.append((clock() - start) / BATCH / 1000)
    return out


def measure_single(
    workload: Workload[T], core: ServerCore, batches: Sequence[Sequence[T]], count: int
) -> list[float]:
    """µs of every op of ``count`` batches timed alone (includes one perf_counter_ns())."""
    gc.collect()
    raw: list[int] = []
    for index in range(count):
        workload(core, batches[index % len(batches)], raw)
    return [ns / 1000 for ns in raw]


@dataclasses.dataclass(frozen=True)
class LookupRows:
    """Per model count: prebuilt specs (batch, single), specs built per op (batch)."""

    prebuilt_batch: Row
    prebuilt_single: Row
    built_batch: Row


def measure_lookups(core: ServerCore, args: argparse.Namespace) -> LookupRows:
    names = core.list_models()
    count = len(names)
    specs = rotating_batches([ModelSpec.latest(name) for name in names])
    label = f"{count:,} models, ModelSpec"
    return LookupRows(
        Row(f"{label} prebuilt  batch", measure_batched(spec_prebuilt, core, specs, args.batches)),
        Row(f"{label} prebuilt  single", measure_single(spec_prebuilt, core, specs, args.passes)),
        Row(
            f"{label} built per op  batch",
            measure_batched(spec_built, core, rotating_batches(names), args.batches),
        ),
    )


def measure_floor(core: ServerCore, args: argparse.Namespace) -> Row:
    requests = rotating_batches([ServableRequest.latest(name) for name in core.list_models()])
    return Row(
        f"floor: {len(core.list_models()):,} models, manager directly  batch",
        measure_batched(floor_manager, core, requests, args.batches),
    )


# --------------------------------------------------------------------------- run


@dataclasses.dataclass
class Results:
    """Everything one run measured."""

    build_s: float = 0.0
    start_s: dict[str, list[float]] = dataclasses.field(default_factory=dict)
    close_s: list[float] = dataclasses.field(default_factory=list)
    footprint: Footprint | None = None
    reload_big: ReloadSeries = dataclasses.field(default_factory=ReloadSeries)
    reload_small: ReloadSeries = dataclasses.field(default_factory=ReloadSeries)
    lookups: list[LookupRows] = dataclasses.field(default_factory=list)
    floor: Row | None = None
    profile: str | None = None


def measure_on_big_core(
    big: ServerCore,
    small: ServerCore,
    extras: dict[str, list[ModelConfig]],
    args: argparse.Namespace,
    results: Results,
) -> None:
    """Sections 3 and 4 on the first 1,000-model core, and on the 10-model one."""
    results.reload_big, results.reload_small = measure_reloads(
        big, small, extras["big"][: args.reloads], extras["small"][: args.reloads]
    )
    if args.profile:
        results.profile = profile_reload(big, extras["big"][args.reloads])
    results.lookups = [measure_lookups(big, args), measure_lookups(small, args)]
    results.floor = measure_floor(big, args)


def measure_all(root: Path, args: argparse.Namespace) -> Results:
    results = Results()
    began = time.perf_counter()
    big_names, small_names = model_names("model", NUM_MODELS), model_names("small", NUM_SMALL)
    # The models the reloads add: distinct per core, each added once (one more to profile).
    extra_names = {
        core: model_names(f"extra-{core}", args.reloads + 1) for core in ("big", "small")
    }
    write_models(
        root,
        [*big_names, *small_names, *extra_names["big"], *extra_names["small"]],
        args.load_ms / 1000,
    )
    results.build_s = time.perf_counter() - began
    big_config, small_config = server_config(root, big_names), server_config(root, small_names)
    extras = {
        core: [ModelConfig.python(name, root / name) for name in names]
        for core, names in extra_names.items()
    }
    # The 10-model core also warms up what the first start would otherwise import (watchdog).
    small, _ = timed_start(small_config, core_options())
    try:
        kinds = start_kinds()
        for round_index in range(args.rounds):
            for kind_index, kind in enumerate(kinds):
                first = round_index == 0 and kind_index == 0
                threads_before, rss_before = threading.active_count(), rss_bytes()
                big, elapsed = timed_start(big_config, kind.options)
                try:
                    results.start_s.setdefault(kind.label, []).append(elapsed)
                    if first:
                        results.footprint = Footprint(
                            (rss_bytes() - rss_before) / NUM_MODELS,
                            threads_before,
                            threading.active_count(),
                            inotify_usage(),
                        )
                        measure_on_big_core(big, small, extras, args, results)
                finally:
                    closing = time.perf_counter()
                    big.close()
                    results.close_s.append(time.perf_counter() - closing)
    finally:
        small.close()
    return results


# --------------------------------------------------------------------------- report

RELOAD_TABLE = PercentileTable(40, ("p50", "p90", "min", "max"))
LOOKUP_TABLE = PercentileTable(52, ("p50", "p90", "p99", "max"))


def print_starts(results: Results) -> None:
    print()
    print(f"1. start: ServerCore(config, options) until all {NUM_MODELS:,} models serve, s")
    print(f"{INDENT}{'':<52}{'runs':>20}{'median':>9}")
    for label, runs in results.start_s.items():
        shown = " ".join(f"{s:.2f}" for s in runs)
        print(f"{INDENT}{label:<52}{shown:>20}{statistics.median(runs):>9.2f}")
    default, steady = (statistics.median(runs) for runs in list(results.start_s.values())[:2])
    unwatched = statistics.median(list(results.start_s.values())[2])
    print(
        f"{INDENT}ratios of medians: steady pool / default {steady / default:.2f}x; "
        f"default with watches / without {default / unwatched:.2f}x "
        f"({(default - unwatched) * 1000 / NUM_MODELS:+.1f} ms per watched model)"
    )
    print(
        f"{INDENT}close() of a {NUM_MODELS:,}-model core: median "
        f"{statistics.median(results.close_s):.2f} s"
    )


def print_footprint(results: Results) -> None:
    footprint = results.footprint
    assert footprint is not None
    print()
    print(f"2. footprint of the first {NUM_MODELS:,}-model core (default threads, watches)")
    print(
        f"{INDENT}RSS per model {footprint.rss_per_model_bytes / 1024:.1f} KiB "
        f"({footprint.rss_per_model_bytes * NUM_MODELS / 2**20:.1f} MiB in all, threads' "
        "stacks included)"
    )
    instances, watches = footprint.inotify
    print(
        f"{INDENT}threads alive {footprint.threads_before} -> {footprint.threads_after} "
        f"(+{footprint.threads_after - footprint.threads_before}: watchdog runs one emitter "
        "thread per watched base path); "
        f"inotify: {instances} instance(s), {watches} watches (both cores)"
    )


def print_reloads(results: Results) -> None:
    print()
    print("3. reload_config adding one model (returns once it serves), and removing it, ms")
    print(RELOAD_TABLE.header())
    big, small = results.reload_big, results.reload_small
    print(RELOAD_TABLE.row(f"{NUM_MODELS:,} models + 1", big.add_ms))
    print(RELOAD_TABLE.row(f"{NUM_SMALL} models + 1", small.add_ms))
    print(RELOAD_TABLE.row(f"{NUM_MODELS:,} + 1 -> {NUM_MODELS:,} (remove)", big.remove_ms))
    print(RELOAD_TABLE.row(f"{NUM_SMALL} + 1 -> {NUM_SMALL} (remove)", small.remove_ms))
    print(
        f"{INDENT}ratios of p50: add to {NUM_MODELS:,} / add to {NUM_SMALL} "
        f"{_reload_ratio(results):.1f}x; remove {_p50(big.remove_ms) / _p50(small.remove_ms):.1f}x"
    )


def print_lookups(results: Results, overhead_ns: float) -> None:
    print()
    print("4. take + release servable_handle(ModelSpec.latest(name)), rotating over the names, µs")
    print(f"{INDENT}batch  = batch of {BATCH} ops / {BATCH}: the cost per op to quote")
    print(
        f"{INDENT}single = each op timed alone (includes ~{overhead_ns:.0f} ns of "
        "perf_counter_ns): read p99 and max here"
    )
    print(LOOKUP_TABLE.header())
    for rows in results.lookups:
        for row in (rows.prebuilt_batch, rows.prebuilt_single, rows.built_batch):
            print(LOOKUP_TABLE.row(row.label, row.samples))
    assert results.floor is not None
    print(LOOKUP_TABLE.row(results.floor.label, results.floor.samples))
    big, small = results.lookups
    print(
        f"{INDENT}ratios of batch p50: {NUM_MODELS:,} / {NUM_SMALL} models "
        f"{_lookup_ratio(results):.2f}x; ServerCore / manager floor "
        f"{big.prebuilt_batch.pct(0.5) / results.floor.pct(0.5):.2f}x; built / prebuilt "
        f"{big.built_batch.pct(0.5) / big.prebuilt_batch.pct(0.5):.2f}x "
        f"(small: {small.built_batch.pct(0.5) / small.prebuilt_batch.pct(0.5):.2f}x)"
    )


def print_targets(results: Results) -> None:
    ratio = _reload_ratio(results)
    print_target(
        ratio <= RELOAD_RATIO_TARGET,
        f"reload_config adding one model to {NUM_MODELS:,} <= {RELOAD_RATIO_TARGET:.0f}x "
        f"adding one to {NUM_SMALL} (no work per unchanged model beyond a diff): {ratio:.1f}x "
        f"({_p50(results.reload_big.add_ms):.1f} ms against "
        f"{_p50(results.reload_small.add_ms):.1f} ms, p50)",
    )
    ratio = _lookup_ratio(results)
    big, small = results.lookups
    print_target(
        ratio <= LOOKUP_RATIO_TARGET,
        f"handle lookup with {NUM_MODELS:,} models <= {LOOKUP_RATIO_TARGET}x with {NUM_SMALL}: "
        f"{ratio:.2f}x ({big.prebuilt_batch.pct(0.5):.2f} µs against "
        f"{small.prebuilt_batch.pct(0.5):.2f} µs, batch p50; p99 "
        f"{big.prebuilt_single.pct(0.99):.2f} against {small.prebuilt_single.pct(0.99):.2f} µs)",
    )


def _p50(samples: Sequence[float]) -> float:
    return percentile(sorted(samples), 0.5)


def _reload_ratio(results: Results) -> float:
    return _p50(results.reload_big.add_ms) / _p50(results.reload_small.add_ms)


def _lookup_ratio(results: Results) -> float:
    big, small = results.lookups
    return big.prebuilt_batch.pct(0.5) / small.prebuilt_batch.pct(0.5)


def timer_overhead_ns(samples: int = 20_000) -> float:
    """Median of back-to-back perf_counter_ns() pairs: what single-op timing adds."""
    clock = time.perf_counter_ns
    out = []
    for _ in range(samples):
        start = clock()
        out.append(clock() - start)
    return float(statistics.median(out))


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=2, help="starts of each kind")
    parser.add_argument("--reloads", type=int, default=10, help="models added per core")
    parser.add_argument("--batches", type=int, default=2000, help="timed lookup batches")
    parser.add_argument("--passes", type=int, default=500, help="single-op batches")
    parser.add_argument(
        "--load-ms", type=float, default=0.0, help="each model's load() sleeps this long"
    )
    parser.add_argument("--profile", action="store_true", help="cProfile of one reload")
    args = parser.parse_args(argv)

    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="servinglib-server-core-scale-") as root:
        print_environment(
            f"server_core_scale: ServerCore with {NUM_MODELS:,} Python models "
            f"(file_system_poll_wait_seconds {POLL_WAIT_S:.0f})"
        )
        print(
            f"models under {root}; each load() sleeps {args.load_ms:g} ms; "
            "RSS from /proc/self/statm"
        )
        results = measure_all(Path(root), args)
    print(f"model directories written and byte-compiled in {results.build_s:.2f} s")
    print_starts(results)
    print_footprint(results)
    print_reloads(results)
    print_lookups(results, timer_overhead_ns())
    if results.profile is not None:
        print()
        print(
            f"profile: reload_config adding one model to {NUM_MODELS:,} (cProfile, calling thread)"
        )
        print(results.profile)
    print()
    print(f"took {time.perf_counter() - began:.1f} s")
    print_targets(results)


if __name__ == "__main__":
    main()
