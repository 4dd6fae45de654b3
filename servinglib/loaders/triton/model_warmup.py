"""A Triton Python model's ``model_warmup``: its samples run through each instance's ``execute``
before the version serves, as Triton runs them.

Each sample is ``batch_size`` requests handed to one ``execute`` (``count`` times, at least
once), each request holding every input the sample names: ``dims`` (with a batch dimension of 1
first when the model batches), zeros (``zero_data``), random bytes (``random_data``; empty
strings for a string input, as Triton) or the raw row-major contents of
``<model>/warmup/<input_data_file>`` (a string element: a 4-byte little-endian length, then its
bytes).  A sample whose request fails fails the load: INVALID_ARGUMENT, "failed to run warmup
sample '<name>': <error>".
"""

from __future__ import annotations

import math
import os
import struct
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from servinglib.errors import InvalidArgumentError, ServingError
from servinglib.loaders.triton.config import TritonModelConfig, numpy_dtype
from servinglib.protos import model_config_pb2 as pb
from servinglib.request_extras import NO_EXTRAS

if TYPE_CHECKING:  # (it imports this module)
    from servinglib.loaders.triton.python_model import TritonPythonServable

WARMUP_DIRECTORY = "warmup"  # Triton's, under the model's directory


def run_warmup(servable: TritonPythonServable, config: TritonModelConfig, model_dir: str) -> None:
    """Runs the config's warmup samples on ``servable`` (one instance), in order.

    Raises InvalidArgumentError for a sample that cannot be made (a dimension left -1, a
    data file too short or outside the model's ``warmup`` directory) or that fails.
    """
    message = config.message
    for sample in message.model_warmup:
        requests = _requests(sample, message, model_dir)
        for _ in range(max(1, sample.count)):
            pending = [
                servable.pending_request(inputs, None, NO_EXTRAS, None) for inputs in requests
            ]
            errors = [
                outcome.message
                for outcome in servable.execute_requests(pending)
                if isinstance(outcome, ServingError)
            ]
            if errors:
                raise InvalidArgumentError(
                    f"failed to run warmup sample '{sample.name}': {'; '.join(errors)}; "
                )


def _requests(
    sample: pb.ModelWarmup, message: pb.ModelConfig, model_dir: str
) -> list[dict[str, npt.NDArray[Any]]]:
    if sample.batch_size < 1:
        raise InvalidArgumentError(
            f"model_warmup sample '{sample.name}': batch_size must be 1 or more"
        )
    originals = {tensor.name for tensor in message.input}
    inputs = {}
    for name, spec in sorted(sample.inputs.items()):
        if any(d < 0 for d in spec.dims):
            raise InvalidArgumentError(
                "warmup setting expects all variable-size dimensions are specified for "
                f"input '{name}'"
            )
        batch = (1,) if message.max_batch_size and name in originals else ()
        inputs[name] = _data(name, spec, (*batch, *spec.dims), model_dir)
    return [dict(inputs) for _ in range(sample.batch_size)]


def _data(
    name: str, spec: pb.ModelWarmup.Input, shape: tuple[int, ...], model_dir: str
) -> npt.NDArray[Any]:
    dtype = numpy_dtype(spec.data_type)
    count = math.prod(shape)
    which = spec.WhichOneof("input_data_type")
    if which is None:
        raise InvalidArgumentError(
            f"warmup setting expects input '{name}' to have input_data_type set"
        )
    if which == "input_data_file":
        return _from_file(name, spec, dtype, shape, model_dir)
    if dtype.kind == "O":  # zeros or "random": empty strings, as Triton
        return np.full(shape, b"", dtype=object)
    if which == "zero_data":
        return np.zeros(shape, dtype)
    random = np.random.default_rng().integers(0, 256, count * dtype.itemsize, dtype=np.uint8)
    return random.view(dtype).reshape(shape)


def _from_file(
    name: str,
    spec: pb.ModelWarmup.Input,
    dtype: np.dtype[Any],
    shape: tuple[int, ...],
    model_dir: str,
) -> npt.NDArray[Any]:
    directory = os.path.realpath(os.path.join(model_dir, WARMUP_DIRECTORY))
    inside = "\0" not in spec.input_data_file  # (a path with NUL names no file)
    path = os.path.realpath(os.path.join(directory, spec.input_data_file)) if inside else ""
    if not inside or os.path.commonpath([directory, path]) != directory:
        raise InvalidArgumentError(
            f"warmup input '{name}': {spec.input_data_file!r} is outside the model's "
            f"{WARMUP_DIRECTORY} directory"
        )
    count = math.prod(shape)
    size = count * dtype.itemsize
    try:
        with open(path, "rb") as file:
            # (a number tensor's bytes only: a larger file is not read whole)
            data = file.read() if dtype.kind == "O" else file.read(size)
    except OSError as error:
        raise InvalidArgumentError(
            f"warmup input '{name}': cannot read {spec.input_data_file!r}: {error.strerror}"
        ) from None
    if dtype.kind == "O":
        return np.array(_strings(name, data, count), dtype=object).reshape(shape)
    if len(data) < size:
        raise InvalidArgumentError(
            f"warmup setting expects {size} bytes, but the data provided from "
            f"{spec.input_data_file} only has {len(data)} bytes"
        )
    return np.frombuffer(data, dtype).reshape(shape).copy()


def _strings(name: str, data: bytes, count: int) -> list[bytes]:
    items, offset = [], 0
    for _ in range(count):
        if offset + 4 > len(data):
            raise InvalidArgumentError(f"warmup input '{name}': the file holds fewer strings")
        (length,) = struct.unpack_from("<I", data, offset)
        offset += 4
        if offset + length > len(data):
            raise InvalidArgumentError(f"warmup input '{name}': a string runs past the file")
        items.append(data[offset : offset + length])
        offset += length
    return items
