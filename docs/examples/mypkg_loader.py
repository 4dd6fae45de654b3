"""A user's own model platform: linear models stored as numpy files.

Each version directory holds ``weights.npy`` (features x outputs) and ``bias.npy`` (outputs);
the served signature computes ``y = x @ weights + bias``.  Tested with servinglib.testing by
test_mypkg_loader.py next to it (docs/guides/testing_loaders.md).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from servinglib import Loader, ResourceAllocation, Servable, SignatureSpec, TensorSpec
from servinglib.errors import (
    DataLossError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
)
from servinglib.servable import DEFAULT_SIGNATURE, Tensors
from servinglib.sources import StoragePath, UnarySourceAdapter

FILES = ("weights.npy", "bias.npy")
RAM_ESTIMATE_FACTOR = 1.2  # the arrays take about their files' size; 20 % head-room


class LinearServable(Servable):
    """``y = x @ weights + bias`` as the signature ``serving_default``.

    Thread-safe: calls only read the arrays.
    """

    def __init__(self, weights: npt.NDArray[np.float32], bias: npt.NDArray[np.float32]) -> None:
        self._weights = weights
        self._bias = bias
        features, outputs = weights.shape
        self._signatures = {
            DEFAULT_SIGNATURE: SignatureSpec(
                inputs=[TensorSpec("x", np.float32, [-1, features])],
                outputs=[TensorSpec("y", np.float32, [-1, outputs])],
            )
        }

    @property
    def signatures(self) -> Mapping[str, SignatureSpec]:
        return self._signatures

    def call(
        self, signature_name: str, inputs: Tensors, output_filter: frozenset[str] | None = None
    ) -> dict[str, npt.NDArray[Any]]:
        return {"y": inputs["x"] @ self._weights + self._bias}


class LinearModelLoader(Loader):
    """Loads the linear model of one version directory.

    The estimate is the files' size x 1.2, computed once (so it never changes).  Missing
    files are NOT_FOUND (retried), unreadable ones DATA_LOSS and arrays of the wrong shapes
    INVALID_ARGUMENT (neither retried).
    Thread safety: as Loader requires.
    """

    def __init__(self, path: StoragePath) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._estimate: ResourceAllocation | None = None  # guarded by: _lock
        self._servable: LinearServable | None = None

    def estimate_resources(self) -> ResourceAllocation:
        with self._lock:
            if self._estimate is None:
                size = sum(_size(Path(self.path) / name) for name in FILES)
                self._estimate = ResourceAllocation.ram_bytes(int(size * RAM_ESTIMATE_FACTOR))
            return self._estimate

    def load(self) -> None:
        weights, bias = (_read(Path(self.path) / name) for name in FILES)
        if weights.ndim != 2 or bias.shape != (weights.shape[1],):
            raise InvalidArgumentError(
                f"{self.path}: weights {weights.shape} and bias {bias.shape} do not fit "
                "(want features x outputs, and outputs)"
            )
        # Assigned last: a failed load leaves nothing behind.
        self._servable = LinearServable(weights.astype(np.float32), bias.astype(np.float32))

    def unload(self) -> None:
        self._servable = None

    def servable(self) -> LinearServable:
        if self._servable is None:
            raise FailedPreconditionError(f"the linear model at {self.path} is not loaded")
        return self._servable


class LinearModelAdapter(UnarySourceAdapter[StoragePath, Loader]):
    """The "linear" platform: each version directory becomes a LinearModelLoader."""

    def convert(self, servable_name: str, data: StoragePath) -> Loader:
        return LinearModelLoader(data)


def make_adapter(_platform_config: object) -> LinearModelAdapter:
    """The platform factory: ``register_platform("linear", "mypkg_loader:make_adapter")``."""
    return LinearModelAdapter()


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:  # load() reports it; an estimate must not raise
        return 0


def _read(path: Path) -> npt.NDArray[Any]:
    try:
        array: npt.NDArray[Any] = np.load(path, allow_pickle=False)
    except FileNotFoundError as exc:
        raise NotFoundError(f"{path} does not exist") from exc
    except (OSError, ValueError) as exc:
        raise DataLossError(f"{path} is not a numpy array file: {exc}") from exc
    return array
