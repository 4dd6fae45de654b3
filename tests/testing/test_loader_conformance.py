"""Tests for check_loader: each check catches a loader broken its way and passes correct ones."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt
import pytest

from servinglib.core.loader import Loader
from servinglib.core.resources import ResourceAllocation
from servinglib.core.simple_loader import SimpleLoader
from servinglib.errors import FailedPreconditionError, NotFoundError, UnavailableError
from servinglib.loaders.python import PythonLoader
from servinglib.servable import Servable, SignatureSpec, Tensors, TensorSpec
from servinglib.testing import (
    Violation,
    assert_loader_conforms,
    check_loader,
    make_version_dirs,
)
from servinglib.testing._memory import resident_bytes

MIB = 2**20
# Few cycles keep the tests quick; the memory tests set their own.
CYCLES = 3
HAS_PROC = resident_bytes() is not None
needs_proc = pytest.mark.skipif(not HAS_PROC, reason="RSS checks read /proc/self/statm")


class Adder(Servable):
    """Adds its first weight to x: a correct, thread-safe servable holding ``weights``."""

    SIGNATURES: ClassVar[Mapping[str, SignatureSpec]] = {
        "serving_default": SignatureSpec(
            [TensorSpec("x", "float32", [-1])], [TensorSpec("y", "float32", [-1])]
        )
    }

    def __init__(self, weights: npt.NDArray[np.float32]) -> None:
        self.weights = weights

    @property
    def signatures(self) -> Mapping[str, SignatureSpec]:
        return self.SIGNATURES

    def call(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> dict[str, npt.NDArray[Any]]:
        return {"y": inputs["x"] + self.weights[0]}


class RacyAdder(Adder):
    """Adds through a scratch buffer shared by every call: wrong under concurrent calls."""

    def __init__(self, weights: npt.NDArray[np.float32]) -> None:
        super().__init__(weights)
        self.scratch = np.zeros(1, np.float32)

    def call(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> dict[str, npt.NDArray[Any]]:
        self.scratch[0] = 0.0
        time.sleep(0.001)  # another call resets or adds meanwhile
        self.scratch += self.weights[0]
        time.sleep(0.001)
        return {"y": inputs["x"] + self.scratch[0]}


class GoodLoader(Loader):
    """A correct loader: an Adder of ``size_bytes`` of weights, estimated at ``estimate_bytes``."""

    servable_class: ClassVar[type[Adder]] = Adder

    def __init__(self, size_bytes: int = MIB, estimate_bytes: int | None = None) -> None:
        self.size_bytes = size_bytes
        self.estimate_bytes = estimate_bytes if estimate_bytes is not None else 2 * size_bytes
        self._servable: Adder | None = None

    def estimate_resources(self) -> ResourceAllocation:
        return ResourceAllocation.ram_bytes(self.estimate_bytes)

    def load(self) -> None:
        # np.full writes every page, so the memory really is resident.
        weights = np.full(self.size_bytes // 4, 1.0, np.float32)
        self._servable = self.servable_class(weights)

    def unload(self) -> None:
        self._servable = None

    def servable(self) -> Adder:
        if self._servable is None:
            raise FailedPreconditionError("not loaded")
        return self._servable


def checks(violations: list[Violation]) -> list[str]:
    return [violation.check for violation in violations]


# -- correct loaders pass ------------------------------------------------------------------


def test_a_correct_loader_passes() -> None:
    """A loader that keeps every promise yields no violation, over the default 20 cycles."""
    assert check_loader(GoodLoader) == []


def test_a_simple_loader_passes_including_failed_loads() -> None:
    """A SimpleLoader conforms, and so do its failed loads when the creator fails until healed."""
    healed = threading.Event()

    def create() -> Adder:
        if not healed.is_set():
            raise UnavailableError("weights not there yet")
        return Adder(np.ones(4, np.float32))

    violations = check_loader(
        lambda: SimpleLoader(lambda: Adder(np.ones(4, np.float32))),
        failing_factory=lambda: SimpleLoader(create, ResourceAllocation.ram_bytes(MIB)),
        heal_failure=lambda _loader: healed.set(),
    )

    assert violations == []
    assert healed.is_set()


MODEL_PY = """
import numpy as np
from pathlib import Path
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    def load(self, path):
        self.scale = float((Path(path) / "scale.txt").read_text())

    @signature(
        name="serving_default",
        inputs=[TensorSpec("x", "float32", [-1, 2])],
        outputs=[TensorSpec("y", "float32", [-1, 2])],
    )
    def predict(self, x):
        return {"y": x * self.scale + 1.0}
"""


def test_a_python_loader_passes_including_a_healed_missing_file(tmp_path: Path) -> None:
    """PythonLoader on a small model.py conforms; a missing file heals once written."""
    files = {"model.py": MODEL_PY, "scale.txt": "2.0"}
    version = make_version_dirs(tmp_path, "m", [1], files) / "1"

    def without_scale() -> PythonLoader:
        """A version directory whose scale.txt is missing."""
        base = make_version_dirs(tmp_path, "broken", [1], {"model.py": MODEL_PY})
        return PythonLoader(str(base / "1"))

    def write_scale(loader: PythonLoader) -> None:
        (Path(loader.path) / "scale.txt").write_text("3.0")

    violations = check_loader(
        lambda: PythonLoader(str(version)),
        failing_factory=without_scale,
        heal_failure=write_scale,
    )

    assert violations == []


def test_assert_loader_conforms_is_silent_for_a_correct_loader() -> None:
    """assert_loader_conforms returns None when nothing is broken."""
    assert_loader_conforms(GoodLoader, cycles=CYCLES)


# -- each check catches its broken loader --------------------------------------------------


class KeepsServableAlive(GoodLoader):
    """Unloads, but keeps the servable in a list it never clears."""

    def __init__(self) -> None:
        super().__init__()
        self.unloaded: list[Adder] = []

    def unload(self) -> None:
        if self._servable is not None:
            self.unloaded.append(self._servable)
        super().unload()


def test_a_servable_kept_alive_after_unload_is_caught_with_its_holder() -> None:
    """unload-releases names the attribute that still holds the servable."""
    violations = check_loader(KeepsServableAlive, cycles=CYCLES)

    assert checks(violations) == ["unload-releases"]
    message = violations[0].message
    assert "still alive after unload() and gc.collect()" in message
    assert "a list in KeepsServableAlive.unloaded" in message


@needs_proc
def test_an_estimate_below_what_load_uses_is_caught() -> None:
    """Loading 48 MiB with a 1 KiB estimate is estimate-too-low, saying by how much."""
    violations = check_loader(lambda: GoodLoader(48 * MIB, estimate_bytes=1024), cycles=1)

    assert checks(violations) == ["estimate-too-low"]
    assert "more than its RAM estimate of 1.0 KiB (+ 16.0 MiB slack)" in violations[0].message


class EstimateGrowsOnLoad(GoodLoader):
    """Estimates more once loaded than before."""

    def estimate_resources(self) -> ResourceAllocation:
        extra = self.size_bytes if self._servable is not None else 0
        return ResourceAllocation.ram_bytes(self.estimate_bytes + extra)


def test_an_estimate_that_increases_is_caught() -> None:
    """An estimate that grows after load() is estimate-increases, with both values."""
    violations = check_loader(EstimateGrowsOnLoad, cycles=CYCLES)

    assert checks(violations) == ["estimate-increases"]
    before, after = "{main/ram_in_bytes: 2097152}", "{main/ram_in_bytes: 3145728}"
    assert f"was {before} and then {after} after load()" in violations[0].message


class ServesWhenNotLoaded(GoodLoader):
    """servable() builds a servable when none is loaded instead of raising."""

    def servable(self) -> Adder:
        if self._servable is None:
            return Adder(np.zeros(1, np.float32))
        return self._servable


def test_servable_working_before_load_and_after_unload_is_caught() -> None:
    """servable() that returns outside load..unload is caught on both sides."""
    violations = check_loader(ServesWhenNotLoaded, cycles=CYCLES)

    assert checks(violations) == ["servable-before-load", "servable-after-unload"]
    assert "servable() returned Adder after unload() instead of raising" in str(violations[1])


class UnloadRaises(GoodLoader):
    def unload(self) -> None:
        super().unload()
        raise OSError("cannot close the weights file")


def test_an_unload_that_raises_is_caught() -> None:
    """An unload() raising is unload-raises, with the error."""
    violations = check_loader(UnloadRaises, cycles=CYCLES)

    assert checks(violations) == ["unload-raises"]
    assert "unload() raised OSError: cannot close the weights file" in violations[0].message


class NotThreadSafe(GoodLoader):
    servable_class = RacyAdder


def test_a_servable_that_is_not_thread_safe_is_caught() -> None:
    """Concurrent calls through a shared scratch buffer give wrong results: concurrent-calls."""
    violations = check_loader(NotThreadSafe, cycles=1)

    assert checks(violations) == ["concurrent-calls"]
    message = violations[0].message
    assert message.startswith(
        "signature 'serving_default' gave other results when called from 8 threads at once"
    )
    assert "it is not thread-safe" in message


class LeaksEveryCycle(GoodLoader):
    """Each load adds 4 MiB to a cache that nothing clears (the servable itself is freed)."""

    cache: ClassVar[list[npt.NDArray[np.float32]]] = []

    def load(self) -> None:
        super().load()
        self.cache.append(np.full(MIB, 1.0, np.float32))


@pytest.fixture
def leak_cache() -> Iterator[None]:
    yield
    LeaksEveryCycle.cache.clear()


@needs_proc
@pytest.mark.usefixtures("leak_cache")
def test_memory_growing_over_cycles_is_caught() -> None:
    """10 cycles leaking 4 MiB each exceed a 16 MiB bound: memory-growth."""
    violations = check_loader(
        lambda: LeaksEveryCycle(estimate_bytes=16 * MIB),
        cycles=10,
        max_memory_growth_bytes=16 * MIB,
    )

    assert checks(violations) == ["memory-growth"]
    assert "9 more load → unload cycles grew the process's resident memory by" in str(violations)


class LoadsOnce(GoodLoader):
    def __init__(self) -> None:
        super().__init__()
        self.used = False

    def load(self) -> None:
        if self.used:
            raise FailedPreconditionError("this loader was used up")
        self.used = True
        super().load()


def test_a_loader_that_cannot_load_again_is_caught() -> None:
    """load() failing after unload() is reload, on cycle 2."""
    violations = check_loader(LoadsOnce, cycles=CYCLES)

    assert checks(violations) == ["reload"]
    assert "load() after unload() raised FailedPreconditionError" in violations[0].message
    assert "(cycle 2)" in violations[0].message


class HalfLoads(GoodLoader):
    """Fails while ``ready`` is unset, leaving its servable and an open flag behind."""

    def __init__(self, ready: threading.Event) -> None:
        super().__init__()
        self.ready = ready
        self.opened = False

    def load(self) -> None:
        if self.opened:
            raise FailedPreconditionError("already open")
        self.opened = True
        super().load()
        if not self.ready.is_set():
            raise NotFoundError("weights missing")


def test_a_failed_load_that_leaves_a_servable_is_caught() -> None:
    """servable() returning after a failed load is failed-load-clean."""
    violations = check_loader(
        GoodLoader, cycles=CYCLES, failing_factory=lambda: HalfLoads(threading.Event())
    )

    assert checks(violations) == ["failed-load-clean"]
    assert "servable() returned Adder after a failed load() instead of raising" in str(violations)


def test_a_failed_load_that_blocks_the_retry_is_caught() -> None:
    """A loader whose failed load leaves it unable to load when healed: failed-load-clean."""

    class StaysOpen(HalfLoads):
        def servable(self) -> Adder:
            raise FailedPreconditionError("not loaded")

    violations = check_loader(
        GoodLoader,
        cycles=CYCLES,
        failing_factory=lambda: StaysOpen(threading.Event()),
        heal_failure=lambda loader: loader.ready.set(),
    )

    assert checks(violations) == ["failed-load-clean"]
    assert "after failed loads and heal_failure(), load() of the same loader raised" in (
        violations[0].message
    )
    assert "FailedPreconditionError: already open" in violations[0].message


def test_a_failing_factory_whose_loader_loads_is_reported() -> None:
    """failing_factory must fail: one that loads is reported, not silently accepted."""
    violations = check_loader(GoodLoader, cycles=CYCLES, failing_factory=GoodLoader)

    assert checks(violations) == ["failed-load-clean"]
    assert "the loader from failing_factory loaded" in violations[0].message


class EstimateRaises(GoodLoader):
    def estimate_resources(self) -> ResourceAllocation:
        raise OSError("stat failed")


def test_an_estimate_that_raises_is_caught() -> None:
    """estimate_resources() raising is estimate-raises."""
    violations = check_loader(EstimateRaises, cycles=CYCLES)

    assert checks(violations) == ["estimate-raises"]
    assert "estimate_resources() raised OSError: stat failed before load()" in str(violations)


def test_a_loader_that_cannot_load_stops_the_check() -> None:
    """A first load() that raises is load-fails, and nothing else is checked."""
    violations = check_loader(lambda: SimpleLoader(_missing_weights), cycles=CYCLES)

    assert checks(violations) == ["load-fails"]
    assert "load() raised NotFoundError: no weights.npy" in violations[0].message


def _missing_weights() -> Adder:
    raise NotFoundError("no weights.npy")


class ServableRaises(GoodLoader):
    def servable(self) -> Adder:
        raise FailedPreconditionError("forgot to keep it")


def test_servable_raising_after_load_is_caught() -> None:
    """servable() raising after a successful load is servable-after-load."""
    violations = check_loader(ServableRaises, cycles=CYCLES)

    assert checks(violations) == ["servable-after-load"]


# -- options -------------------------------------------------------------------------------


def test_each_check_reports_at_most_once_and_skip_silences_it() -> None:
    """A flaw met on every cycle is reported once; skip drops the check altogether."""
    assert checks(check_loader(UnloadRaises, cycles=5)) == ["unload-raises"]
    assert check_loader(UnloadRaises, cycles=5, skip=["unload-raises"]) == []


def test_an_unknown_skip_id_is_rejected() -> None:
    """A misspelt check id raises ValueError listing the known ids instead of skipping nothing."""
    with pytest.raises(ValueError, match=r"unknown check ids \['unload-raise'\]; known: "):
        check_loader(GoodLoader, skip=["unload-raise"])


def test_assert_loader_conforms_lists_every_violation() -> None:
    """The AssertionError names each broken check on its own line."""
    with pytest.raises(AssertionError) as raised:
        assert_loader_conforms(ServesWhenNotLoaded, cycles=CYCLES)

    lines = str(raised.value).splitlines()
    assert lines[0] == "The loader breaks its contract in 2 way(s):"
    assert lines[1].startswith("  - servable-before-load: servable() returned Adder before load()")
    assert lines[2].startswith("  - servable-after-unload: ")


def test_inputs_replace_the_zeros() -> None:
    """Given inputs are used instead of zeros: a servable rejecting zeros then passes."""

    class RejectsZeros(Adder):
        def call(
            self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
        ) -> dict[str, npt.NDArray[Any]]:
            if not inputs["x"].all():
                raise ValueError("x must be non-zero")
            return super().call(signature_name, inputs, output_filter)

    class Loads(GoodLoader):
        servable_class = RejectsZeros

    with_zeros = check_loader(Loads, cycles=1)
    with_inputs = check_loader(
        Loads, cycles=1, inputs={"serving_default": {"x": np.ones(3, np.float32)}}
    )

    assert checks(with_zeros) == ["concurrent-calls"]
    assert "raised when called alone with zeros built from its input specs" in str(with_zeros)
    assert with_inputs == []


def test_call_checks_servables_that_are_not_servinglib_servables() -> None:
    """With call=, a plain object's concurrent use is checked too."""

    class Counter:
        def __init__(self) -> None:
            self.pending: list[int] = []

        def bump(self) -> int:
            """Counts the calls in flight through a shared list: 1 alone, more at once."""
            self.pending.append(1)
            time.sleep(0.001)
            count = len(self.pending)
            self.pending.clear()
            return count

    violations = check_loader(
        lambda: SimpleLoader(Counter), cycles=1, call=lambda counter: counter.bump()
    )

    assert checks(violations) == ["concurrent-calls"]
    assert violations[0].message.startswith("call(servable) gave other results")


# -- output_filter ---------------------------------------------------------------------------


class TwoOutputs(Adder):
    """y = x + 1 and z = 2x, returning only the outputs the filter asks for: correct."""

    SIGNATURES: ClassVar[Mapping[str, SignatureSpec]] = {
        "serving_default": SignatureSpec(
            [TensorSpec("x", "float32", [-1])],
            [TensorSpec("y", "float32", [-1]), TensorSpec("z", "float32", [-1])],
        )
    }

    def __init__(self) -> None:
        super().__init__(np.ones(1, np.float32))

    def call(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> dict[str, npt.NDArray[Any]]:
        outputs = self.outputs(inputs["x"], filtered=output_filter is not None)
        return {k: v for k, v in outputs.items() if output_filter is None or k in output_filter}

    def outputs(self, x: npt.NDArray[Any], *, filtered: bool) -> dict[str, npt.NDArray[Any]]:
        return {"y": x + 1, "z": x * 2}


class IgnoresOutputFilter(TwoOutputs):
    """Returns every output whatever the filter asks for: a filtered request fails with INTERNAL."""

    def call(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> dict[str, npt.NDArray[Any]]:
        return self.outputs(inputs["x"], filtered=False)


class FilterChangesValues(TwoOutputs):
    """Computes z another way when outputs are filtered: the filter changes the answer."""

    def outputs(self, x: npt.NDArray[Any], *, filtered: bool) -> dict[str, npt.NDArray[Any]]:
        return {"y": x + 1, "z": x * 3 if filtered else x * 2}


def test_a_servable_honouring_output_filter_passes() -> None:
    """A two-output servable that returns exactly the outputs asked for conforms."""
    assert check_loader(lambda: SimpleLoader(TwoOutputs), cycles=CYCLES) == []


def test_a_servable_ignoring_output_filter_is_caught() -> None:
    """Returning every output for a filtered call is output-filter, naming what came back."""
    violations = check_loader(lambda: SimpleLoader(IgnoresOutputFilter), cycles=CYCLES)

    assert checks(violations) == ["output-filter"]
    assert violations[0].message.startswith(
        "signature 'serving_default' with zeros built from its input specs"
    )
    assert "returned ['y', 'z'] for output_filter {'y'}" in violations[0].message
    assert "fails with INTERNAL" in violations[0].message


def test_a_filter_that_changes_an_output_is_caught() -> None:
    """A filtered output whose value differs from the unfiltered call's is output-filter."""
    inputs = {"serving_default": {"x": np.array([1.0, 2.0], np.float32)}}
    violations = check_loader(
        lambda: SimpleLoader(FilterChangesValues), cycles=CYCLES, inputs=inputs
    )

    assert checks(violations) == ["output-filter"]
    assert "another value for 'z' with output_filter {'z'}" in violations[0].message


# -- threads and file descriptors --------------------------------------------------------------


class LeaksAThreadPerLoad(GoodLoader):
    """Starts a 'poller' thread on every load and never stops it."""

    stop = threading.Event()
    started: ClassVar[list[threading.Thread]] = []

    def load(self) -> None:
        super().load()
        poller = threading.Thread(target=self.stop.wait, name="poller", daemon=True)
        poller.start()
        self.started.append(poller)


class LeaksAnFdPerLoad(GoodLoader):
    """Opens its weights file on every load and never closes it."""

    opened: ClassVar[list[int]] = []

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path

    def load(self) -> None:
        super().load()
        self.opened.append(os.open(self.path, os.O_RDONLY))


class StartsOnePoolForGood(GoodLoader):
    """Starts one shared thread on its first load and keeps it: a pool, not a leak."""

    stop = threading.Event()
    pool: ClassVar[list[threading.Thread]] = []

    def load(self) -> None:
        super().load()
        if not self.pool:
            worker = threading.Thread(target=self.stop.wait, name="pool", daemon=True)
            worker.start()
            self.pool.append(worker)


@pytest.fixture
def stop_leaked_threads() -> Iterator[None]:
    """Ends the threads the leaking loaders started, once the test is done with them."""
    yield
    for loader in (LeaksAThreadPerLoad, StartsOnePoolForGood):
        loader.stop.set()
        threads = loader.started if loader is LeaksAThreadPerLoad else loader.pool
        for thread in threads:
            thread.join(30.0)
        threads.clear()
        loader.stop.clear()


@needs_proc
@pytest.mark.usefixtures("stop_leaked_threads")
def test_a_thread_leaked_per_load_is_caught_and_named() -> None:
    """A thread started by every load and never stopped is thread-growth, naming the thread."""
    violations = check_loader(LeaksAThreadPerLoad, cycles=6)

    assert checks(violations) == ["thread-growth"]
    message = violations[0].message
    assert message.startswith("5 more load → unload cycles left ")  # 5, or more with strays
    assert "threads ('poller' x 5" in message
    assert "max_thread_growth" in message


@pytest.mark.usefixtures("stop_leaked_threads")
def test_threads_kept_within_the_tolerance_pass() -> None:
    """One thread started on the first load and kept is no leak; a raised bound allows more."""
    assert check_loader(StartsOnePoolForGood) == []
    # 3 leaked threads, under a bound with room for a stray thread of an earlier test ending late.
    assert check_loader(LeaksAThreadPerLoad, cycles=4, max_thread_growth=8) == []


@needs_proc
def test_a_file_descriptor_leaked_per_load_is_caught_and_named(tmp_path: Path) -> None:
    """A file opened by every load and never closed is fd-growth, naming the file."""
    weights = tmp_path / "weights.bin"
    weights.write_bytes(b"\0" * 16)
    try:
        violations = check_loader(lambda: LeaksAnFdPerLoad(weights), cycles=8)
    finally:
        for fd in LeaksAnFdPerLoad.opened:
            os.close(fd)
        LeaksAnFdPerLoad.opened.clear()

    assert checks(violations) == ["fd-growth"]
    assert violations[0].message.startswith(
        f"7 more load → unload cycles left 7 more file descriptors ('{weights}' x 7) open"
    )


class FailsLeavingAThread(GoodLoader):
    """A load that starts its thread, then fails without stopping it."""

    stop = LeaksAThreadPerLoad.stop
    started = LeaksAThreadPerLoad.started

    def load(self) -> None:
        poller = threading.Thread(target=self.stop.wait, name="loader-io", daemon=True)
        poller.start()
        self.started.append(poller)
        raise NotFoundError("no model here yet")


@pytest.mark.usefixtures("stop_leaked_threads")
def test_failed_loads_that_leave_threads_are_caught() -> None:
    """Threads left by failed loads are failed-load-clean."""
    violations = check_loader(GoodLoader, cycles=6, failing_factory=FailsLeavingAThread)

    assert checks(violations) == ["failed-load-clean"]
    message = violations[0].message
    assert message.startswith("5 more failed loads left ")
    assert "threads ('loader-io' x 5" in message
