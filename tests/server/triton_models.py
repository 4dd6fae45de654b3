"""Triton-format model repositories whose Python models both Triton and servinglib serve.

Each model's ``<version>/model.py`` defines Triton's ``TritonPythonModel`` when Triton's
``triton_python_backend_utils`` can be imported, and servinglib's ``Model`` otherwise, so
that one repository is served by the oracle and by us alike: ``OUTPUT0 = INPUT0 + INPUT1``
and ``OUTPUT1 = INPUT0 - INPUT1``, times the version number.
"""

from __future__ import annotations

from pathlib import Path

from tests.triton.oracle import ADD_SUB_CONFIG

MODEL_PY = """
try:
    import triton_python_backend_utils as pb_utils
except ImportError:
    pb_utils = None

FACTOR = {factor}

if pb_utils is None:
    from servinglib.loaders.python import PythonModel, signature
    from servinglib.servable import TensorSpec

    SHAPE = {shape}

    class Model(PythonModel):
        @signature(
            name="serving_default",
            inputs=[TensorSpec(n, "float32", SHAPE) for n in ("INPUT0", "INPUT1")],
            outputs=[TensorSpec(n, "float32", SHAPE) for n in ("OUTPUT0", "OUTPUT1")],
        )
        def add_sub(self, INPUT0, INPUT1):
            return {{"OUTPUT0": (INPUT0 + INPUT1) * FACTOR, "OUTPUT1": (INPUT0 - INPUT1) * FACTOR}}

else:

    class TritonPythonModel:
        def execute(self, requests):
            responses = []
            for request in requests:
                a = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
                b = pb_utils.get_input_tensor_by_name(request, "INPUT1").as_numpy()
                outputs = [
                    pb_utils.Tensor("OUTPUT0", (a + b) * FACTOR),
                    pb_utils.Tensor("OUTPUT1", (a - b) * FACTOR),
                ]
                responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
            return responses
"""

TENSORS = """
input [
  { name: "INPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "INPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
output [
  { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ 4 ] },
  { name: "OUTPUT1" data_type: TYPE_FP32 dims: [ 4 ] }
]
"""

ADD_SUB = ADD_SUB_CONFIG
"""add_sub's config.pbtxt: batched inputs ([-1, 4]), no dynamic batching."""

BATCHED = f"""
backend: "python"
max_batch_size: 8
{TENSORS}
dynamic_batching {{
  max_queue_delay_microseconds: 20000 preferred_batch_size: [ 4 ] preserve_ordering: true
}}
"""
"""A batched model: dynamic batching on, with a field servinglib does not implement
(``preserve_ordering``)."""

ALL_VERSIONS = f"""
backend: "python"
max_batch_size: 8
{TENSORS}
version_policy: {{ all {{ }} }}
"""
"""A model whose every version is served."""

UNBATCHED = f"""
backend: "python"
{TENSORS}
"""
"""A model taking whole [4] tensors (max_batch_size 0)."""

BAD = 'backend: "python"\nmax_batch_size: [ 8 ]\n'
"""A config.pbtxt that does not parse (Triton does not load it either)."""

GPU = f"""
backend: "python"
max_batch_size: 8
{TENSORS}
instance_group [ {{ kind: KIND_GPU }} ]
"""
"""A model asking for a GPU (none is configured)."""


def write_model(repository: Path, name: str, config: str, versions: tuple[int, ...] = (1,)) -> Path:
    """Writes model ``name`` (its config.pbtxt, each version's model.py) into ``repository``."""
    model = repository / name
    model.mkdir(parents=True, exist_ok=True)
    batched = "max_batch_size: 8" in config or "max_batch_size: 4" in config
    shape = [-1, 4] if batched else [4]
    for version in versions:
        (model / str(version)).mkdir(exist_ok=True)
        source = MODEL_PY.format(factor=version, shape=shape)
        (model / str(version) / "model.py").write_text(source, encoding="utf-8")
    (model / "config.pbtxt").write_text(config, encoding="utf-8")
    return model
