"""The start-up "Try:" line: a curl command whose request the served model's signature accepts."""

from __future__ import annotations

import itertools
import json
import math
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from servinglib.errors import ServingError
from servinglib.servable import DEFAULT_SIGNATURE, SignatureSpec, TensorSpec
from servinglib.server.model_spec import ModelSpec
from servinglib.server.server_core import ServerCore

# Beyond this many values in all, an example is no longer a line to copy (an image, say).
MAX_EXAMPLE_VALUES = 32
# Instances in a request whose inputs are each a batch of scalars, as TF Serving's own examples.
_SCALAR_INSTANCES = 3


def try_command(
    core: ServerCore, host: str, port: int, *, scheme: str = "http", header: str = ""
) -> str | None:
    """``curl -d '<body>' <url>`` predicting with the first model an example can be made for.

    The body is built from the default signature of the model's latest
    version (:func:`example_request`).  None when no model has one.
    ``header``: a header the request needs (the inference group's), sent
    with a placeholder value, never the credential.
    """
    shown_host = "localhost" if host in {"0.0.0.0", "::", ""} else host
    if ":" in shown_host:
        shown_host = f"[{shown_host}]"
    for name in core.list_models():
        try:
            signatures = core.model_metadata(ModelSpec.latest(name)).signatures
        except ServingError:  # not available (started degraded) or without signatures
            continue
        body = example_request(signatures)
        if body is not None:
            url = f"{scheme}://{shown_host}:{port}/v1/models/{name}:predict"
            auth = f"-H {shlex.quote(header + ': <credential>')} " if header else ""
            return f"curl {auth}-d {shlex.quote(json.dumps(body))} {shlex.quote(url)}"
    return None


def example_request(signatures: Mapping[str, SignatureSpec]) -> dict[str, Any] | None:
    """A TF Serving REST predict body the default signature accepts; None if none can be made.

    The default signature is ``serving_default``, or the only signature
    (then named in the body).  Inputs must be numbers or booleans (a string
    tensor's meaning cannot be guessed) and take at most
    ``MAX_EXAMPLE_VALUES`` values in all.  Dimensions of unknown size are
    1; when every input has a batch dimension the body is in the row format
    (``instances``), else in the columnar one (``inputs``).
    """
    named: dict[str, Any] = {}
    if DEFAULT_SIGNATURE in signatures:
        spec = signatures[DEFAULT_SIGNATURE]
    elif len(signatures) == 1:
        [(name, spec)] = signatures.items()
        named = {"signature_name": name}
    else:
        return None
    inputs = spec.inputs
    if not inputs or not all(tensor.dtype.kind in "biuf" for tensor in inputs.values()):
        return None
    shapes = {name: _shape(tensor) for name, tensor in inputs.items()}
    if all(shape and shape[0] == -1 for shape in shapes.values()):
        instance_shapes = {name: shape[1:] for name, shape in shapes.items()}
        count = _SCALAR_INSTANCES if all(not s for s in instance_shapes.values()) else 1
        if _values(instance_shapes) * count > MAX_EXAMPLE_VALUES:
            return None
        rows = [_row(inputs, instance_shapes, start=i) for i in range(count)]
        return {**named, "instances": rows}
    full_shapes = {name: [1 if d == -1 else d for d in shape] for name, shape in shapes.items()}
    if _values(full_shapes) > MAX_EXAMPLE_VALUES:
        return None
    return {**named, "inputs": _row(inputs, full_shapes, start=0)}


def _shape(tensor: TensorSpec) -> tuple[int, ...]:
    # Unknown rank takes anything: a batch of scalars is the simplest example.
    return tensor.shape if tensor.shape is not None else (-1,)


def _values(shapes: Mapping[str, Sequence[int]]) -> int:
    return sum(math.prod(1 if d == -1 else d for d in shape) for shape in shapes.values())


def _row(inputs: Mapping[str, TensorSpec], shapes: Mapping[str, Sequence[int]], start: int) -> Any:  # noqa: ANN401 - JSON
    """One value per input (the bare value for a single input), counting up from ``start`` + 1."""
    row = {
        name: _tensor(inputs[name], [1 if d == -1 else d for d in shape], start)
        for name, shape in shapes.items()
    }
    return next(iter(row.values())) if len(row) == 1 else row


def _tensor(spec: TensorSpec, shape: Sequence[int], start: int) -> Any:  # noqa: ANN401 - JSON
    kind = spec.dtype.kind
    numbers = itertools.count(start + 1)

    def value() -> bool | int | float:
        number = next(numbers)
        if kind == "b":
            return True
        return float(number) if kind == "f" else number

    def nested(dims: Sequence[int]) -> Any:  # noqa: ANN401 - JSON
        if not dims:
            return value()
        return [nested(dims[1:]) for _ in range(dims[0])]

    return nested(shape)
