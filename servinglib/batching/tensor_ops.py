"""Batch tensor operations: merge requests along dimension 0, pad, and split outputs back.

Pure functions of numpy arrays, so their laws are property-tested:
``split(f(merge(x)), sizes)`` equals ``[f(r) for r in x]`` for any row-wise ``f``.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from servinglib.errors import FailedPreconditionError, InvalidArgumentError
from servinglib.servable import Tensors


def batch_key(tensors: Tensors) -> Hashable:
    """What requests must share to merge unpadded: each input's dtype and non-batch dimensions."""
    return tuple((name, value.dtype, value.shape[1:]) for name, value in sorted(tensors.items()))


def rows(tensors: Tensors) -> int:
    """The request's batch size: dimension 0, which every input must share.

    Raises InvalidArgumentError for a scalar input (nothing to batch along)
    or inputs that disagree on dimension 0.
    """
    size: int | None = None
    for name, value in tensors.items():
        if value.ndim == 0:
            raise InvalidArgumentError(
                f"Input tensor '{name}' is a scalar: batching needs a batch dimension (dimension 0)"
            )
        if size is None:
            size = value.shape[0]
        elif value.shape[0] != size:
            raise InvalidArgumentError(
                f"Input tensors disagree on the batch dimension: '{name}' has {value.shape[0]} "
                f"rows, others {size}"
            )
    if size is None:
        raise InvalidArgumentError("A batched request needs at least one input tensor")
    return size


def merge(
    requests: Sequence[Tensors],
    *,
    padded_size: int | None = None,
    pad_variable_length: bool = False,
) -> dict[str, npt.NDArray[Any]]:
    """Concatenates the requests' inputs along dimension 0, padded to ``padded_size`` rows.

    Padding rows copy the first row (TF Serving's rule); an empty batch
    has no row to copy and stays empty.  With
    ``pad_variable_length``, other dimensions of each input are padded to
    the largest in the batch with that tensor's first element.
    Requires: every request has the same input names.
    Raises InvalidArgumentError for dtypes or (unpadded) shapes that differ.
    """
    first = requests[0]
    merged: dict[str, npt.NDArray[Any]] = {}
    for name in first:
        parts = [request[name] for request in requests]
        _check_mergeable(name, parts, pad_variable_length)
        if pad_variable_length:
            parts = _pad_to_largest(parts)
        total = sum(part.shape[0] for part in parts)
        if padded_size is not None and padded_size > total > 0:  # one copy, padding included
            first_row = next(part[:1] for part in parts if part.shape[0])
            parts = [*parts, np.repeat(first_row, padded_size - total, axis=0)]
        merged[name] = parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)
    return merged


def split(
    outputs: Mapping[str, npt.NDArray[Any]], sizes: Sequence[int], *, batch_size: int
) -> list[dict[str, npt.NDArray[Any]]]:
    """Cuts each output's first ``sum(sizes)`` rows into one slice per request (views, no copies).

    ``batch_size`` is the size the batch ran at (padding included).
    Raises FailedPreconditionError when an output has no batch dimension or
    a dimension 0 other than ``batch_size``: such a signature cannot be
    batched.
    """
    for name, value in outputs.items():
        if value.ndim == 0 or value.shape[0] != batch_size:
            shape = list(value.shape)
            raise FailedPreconditionError(
                f"Batched output tensor '{name}' has shape {shape}, but the batch had "
                f"{batch_size} rows: a batched signature's outputs need the batch as dimension 0"
            )
    pieces: list[dict[str, npt.NDArray[Any]]] = []
    start = 0
    for size in sizes:
        stop = start + size
        pieces.append({name: value[start:stop] for name, value in outputs.items()})
        start = stop
    return pieces


def _check_mergeable(name: str, parts: list[npt.NDArray[Any]], pad_variable_length: bool) -> None:
    want = parts[0]
    for part in parts[1:]:
        if part.dtype != want.dtype:
            raise InvalidArgumentError(
                f"Input tensor '{name}' has dtype {part.dtype} in one request and {want.dtype} in "
                "another of the same batch"
            )
        if part.ndim != want.ndim:
            raise InvalidArgumentError(
                f"Input tensor '{name}' has rank {part.ndim} in one request and {want.ndim} in "
                "another of the same batch"
            )
        if not pad_variable_length and part.shape[1:] != want.shape[1:]:
            raise InvalidArgumentError(
                f"Input tensor '{name}' has shape {list(part.shape)} in one request and "
                f"{list(want.shape)} in another of the same batch; enable "
                "pad_variable_length_inputs to pad them"
            )


def _pad_to_largest(parts: list[npt.NDArray[Any]]) -> list[npt.NDArray[Any]]:
    largest = tuple(max(dims) for dims in zip(*(p.shape[1:] for p in parts), strict=True))
    padded = []
    for part in parts:
        missing = [(0, 0)] + [
            (0, want - have) for want, have in zip(largest, part.shape[1:], strict=True)
        ]
        if any(after for _, after in missing):
            if part.size == 0:
                raise InvalidArgumentError(
                    "Cannot pad an empty input tensor: it has no first element to pad with"
                )
            padded.append(_pad_with_first_element(part, missing))
        else:
            padded.append(part)
    return padded


def _pad_with_first_element(
    part: npt.NDArray[Any], widths: list[tuple[int, int]]
) -> npt.NDArray[Any]:
    fill = part.reshape(-1)[0]
    shape = tuple(size + after for size, (_, after) in zip(part.shape, widths, strict=True))
    out = np.full(shape, fill, dtype=part.dtype)
    out[tuple(slice(0, size) for size in part.shape)] = part
    return out
