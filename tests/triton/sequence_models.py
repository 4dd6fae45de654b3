"""Stateful Triton Python-backend models for the sequence tests, for our server and the oracle.

The accumulator answers each request with its sequence's running sum of INPUT, keyed by the
CORRID control input (reset at START, dropped at END), and with what it saw (SEEN, JSON):
the control values, ``correlation_id()``, its instance, and the CORRIDs of the requests its
``execute`` got together.  Requests with READY false (Triton's empty slots) are answered
with zeros and left out of ``batch``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

ACCUMULATOR_MODEL_PY = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


def _value(request, name):
    tensor = pb_utils.get_input_tensor_by_name(request, name)
    return None if tensor is None else tensor.as_numpy().reshape(-1)[0]


def _plain(value):
    if isinstance(value, bytes):
        return value.decode()
    return value.item() if hasattr(value, "item") else value


class TritonPythonModel:
    def initialize(self, args):
        self.instance = args["model_instance_name"]
        self.sums = {}

    def execute(self, requests):
        ready = [bool(_value(r, "READY")) for r in requests]
        batch = [_plain(_value(r, "CORRID")) for r, ok in zip(requests, ready) if ok]
        responses = []
        for request, is_ready in zip(requests, ready):
            shape = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy().shape
            if not is_ready:
                zeros = np.zeros(shape, dtype=np.int32)
                seen = np.full(shape, b"{}", dtype=object)
                responses.append(pb_utils.InferenceResponse(
                    [pb_utils.Tensor("OUTPUT", zeros), pb_utils.Tensor("SEEN", seen)]))
                continue
            corrid = _plain(_value(request, "CORRID"))
            start = _plain(_value(request, "START"))
            end = _plain(_value(request, "END"))
            total = (0 if start else self.sums.get(corrid, 0)) + int(_value(request, "INPUT"))
            if end:
                self.sums.pop(corrid, None)
            else:
                self.sums[corrid] = total
            seen = {
                "start": start,
                "end": end,
                "ready": _plain(_value(request, "READY")),
                "corrid": corrid,
                "correlation_id": request.correlation_id(),
                "instance": self.instance,
                "batch": batch,
            }
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT", np.full(shape, total, dtype=np.int32)),
                pb_utils.Tensor("SEEN", np.full(shape, json.dumps(seen).encode(), dtype=object)),
            ]))
        return responses
"""


def accumulator_config(
    name: str,
    *,
    max_batch_size: int = 8,
    strategy: str = "direct { }",
    corrid_type: str = "TYPE_UINT64",
    extra: str = "",
    model_extra: str = "",
) -> str:
    """The accumulator's config.pbtxt: START as int32, END as fp32, READY as bool values;
    ``strategy``: the ``sequence_batching`` strategy; ``extra``: more of ``sequence_batching``
    (``max_sequence_idle_microseconds``); ``model_extra``: more of the model."""
    return f"""
name: "{name}"
backend: "python"
max_batch_size: {max_batch_size}
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [
  {{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }},
  {{ name: "SEEN" data_type: TYPE_STRING dims: [ 1 ] }}
]
sequence_batching {{
  {strategy}
  control_input [
    {{ name: "START" control [ {{ kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "END" control [ {{ kind: CONTROL_SEQUENCE_END fp32_false_true: [ 0, 1 ] }} ] }},
    {{ name: "READY"
      control [ {{ kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] }} ] }},
    {{ name: "CORRID" control [ {{ kind: CONTROL_SEQUENCE_CORRID data_type: {corrid_type} }} ] }}
  ]
  {extra}
}}
{model_extra}
"""


def write_accumulator(repository: Path, name: str = "accumulator", **config: Any) -> Path:
    """Writes the accumulator as ``name`` (config as :func:`accumulator_config`); its dir."""
    model_dir = repository / name
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.py").write_text(ACCUMULATOR_MODEL_PY)
    (model_dir / "config.pbtxt").write_text(accumulator_config(name, **config))
    return model_dir


def step_input(value: int, max_batch_size: int = 8) -> dict[str, np.ndarray]:
    """The accumulator's INPUT of one request adding ``value``."""
    shape = (1, 1) if max_batch_size else (1,)
    return {"INPUT": np.full(shape, value, dtype=np.int32)}


def seen(answer: dict[str, Any]) -> dict[str, Any]:
    """What the model saw of the request ``answer`` answers."""
    result: dict[str, Any] = json.loads(answer["outputs"]["SEEN"][0])
    return result


def total(answer: dict[str, Any]) -> int:
    """The running sum ``answer`` gives."""
    value = answer["outputs"]["OUTPUT"]
    while isinstance(value, list):
        value = value[0]
    return int(value)


STATEFUL_MODEL_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            state = pb_utils.get_input_tensor_by_name(request, "STATE_IN").as_numpy()
            value = pb_utils.get_input_tensor_by_name(request, "INPUT").as_numpy()
            following = (state + value).astype(np.int32)
            responses.append(pb_utils.InferenceResponse([
                pb_utils.Tensor("OUTPUT", following),
                pb_utils.Tensor("STATE_OUT", following),
            ]))
        return responses
"""


def write_stateful(repository: Path, name: str = "stateful", initial_state: str = "") -> Path:
    """Writes a running sum kept as implicit state (the model keeps nothing) as ``name``;
    ``initial_state``: the state's ``initial_state`` entry (none: zeros).  Its directory."""
    model_dir = repository / name
    (model_dir / "1").mkdir(parents=True)
    (model_dir / "1" / "model.py").write_text(STATEFUL_MODEL_PY)
    initial = f"initial_state: {{ {initial_state} }}" if initial_state else ""
    (model_dir / "config.pbtxt").write_text(f"""
backend: "python"
max_batch_size: 8
input [ {{ name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] }} ]
sequence_batching {{
  state [ {{
    input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_INT32 dims: [ 1 ]
    {initial}
  }} ]
}}
""")
    return model_dir
