"""Ensembles and the Python models they call, written as Triton's docs show, for both servers.

``write_pipeline_repository`` writes a repository both servinglib and Triton serve: a chain
(``pipeline``: pre-processor → model → post-processor) and a diamond (``diamond``: two
branches that must be inside ``execute`` at once, then a join).  The branches meet at a
rendezvous of files (each writes its mark and waits for the other's), so a diamond whose
branches ran one after the other fails instead of being slow.
"""

from __future__ import annotations

from pathlib import Path

UNARY_CONFIG = """
backend: "python"
max_batch_size: 0
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] }} ]
{extra}
"""

UNARY_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            if (x < 0).any():
                error = pb_utils.TritonError("negative input", pb_utils.TritonError.INVALID_ARG)
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            y = np.asarray({expression}, dtype=np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", y)]))
        return responses
"""

BRANCH_PY = """
import json
import os
import time

import numpy as np
import triton_python_backend_utils as pb_utils

NAME = {name!r}
OTHER = {other!r}


class TritonPythonModel:
    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.meeting = config["parameters"]["rendezvous"]["string_value"]

    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            token = str(int(x.flat[0]))
            open(os.path.join(self.meeting, NAME + "-" + token), "w").close()
            other = os.path.join(self.meeting, OTHER + "-" + token)
            deadline = time.monotonic() + 20
            while not os.path.exists(other) and time.monotonic() < deadline:
                time.sleep(0.002)
            met = os.path.exists(other)
            y = np.asarray(x * {factor} if met else x * 0 - 1000, dtype=np.float32)
            responses.append(pb_utils.InferenceResponse([pb_utils.Tensor("OUT", y)]))
        return responses
"""

JOIN_CONFIG = """
backend: "python"
max_batch_size: 0
input [
  { name: "A" data_type: TYPE_FP32 dims: [ -1 ] },
  { name: "B" data_type: TYPE_FP32 dims: [ -1 ] }
]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
"""

JOIN_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            a = pb_utils.get_input_tensor_by_name(request, "A").as_numpy()
            b = pb_utils.get_input_tensor_by_name(request, "B").as_numpy()
            out = pb_utils.Tensor("OUT", (a + b).astype(np.float32))
            responses.append(pb_utils.InferenceResponse([out]))
        return responses
"""


def chain_config(*steps: tuple[str, int, str, str]) -> str:
    """An ensemble's config.pbtxt whose steps run one after another: each step is (model,
    version, its input, its output); the first reads INPUT, the last makes OUTPUT, each
    other tensor is named after the step that makes it."""
    lines = []
    tensor = "INPUT"
    for index, (model, version, input_name, output_name) in enumerate(steps):
        made = "OUTPUT" if index == len(steps) - 1 else f"step{index}"
        lines.append(
            f'    {{ model_name: "{model}" model_version: {version} '
            f'input_map {{ key: "{input_name}" value: "{tensor}" }} '
            f'output_map {{ key: "{output_name}" value: "{made}" }} }}'
        )
        tensor = made
    steps_text = ",\n".join(lines)
    return f"""
platform: "ensemble"
max_batch_size: 0
input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ -1 ] }} ]
ensemble_scheduling {{
  step [
{steps_text}
  ]
}}
"""


PIPELINE_CONFIG = chain_config(
    ("pre", -1, "IN", "OUT"), ("double", 1, "IN", "OUT"), ("post", -1, "IN", "OUT")
)
"""pre, then version 1 of double, then post."""


DIAMOND_CONFIG = """
platform: "ensemble"
max_batch_size: 0
input [ { name: "INPUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUTPUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
ensemble_scheduling {
  step [
    {
      model_name: "join"
      model_version: -1
      input_map { key: "A" value: "left_out" }
      input_map { key: "B" value: "right_out" }
      output_map { key: "OUT" value: "OUTPUT" }
    },
    {
      model_name: "left"
      model_version: -1
      input_map { key: "IN" value: "INPUT" }
      output_map { key: "OUT" value: "left_out" }
    },
    {
      model_name: "right"
      model_version: -1
      input_map { key: "IN" value: "INPUT" }
      output_map { key: "OUT" value: "right_out" }
    }
  ]
}
"""


def write(repository: Path, name: str, config: str, model_py: str | None = None) -> Path:
    """``repository/name`` with ``config`` and version 1 (holding ``model_py`` if given)."""
    directory = repository / name
    (directory / "1").mkdir(parents=True)
    (directory / "config.pbtxt").write_text(config)
    if model_py is not None:
        (directory / "1" / "model.py").write_text(model_py)
    return directory


def unary(repository: Path, name: str, expression: str) -> Path:
    """A Python model OUT = ``expression`` of x (IN); a negative input fails its request."""
    return write(
        repository,
        name,
        UNARY_CONFIG.format(extra=""),
        UNARY_PY.format(expression=expression),
    )


def write_pipeline_repository(repository: Path, rendezvous: Path) -> Path:
    """The chain and the diamond, with their step models (see the module); ``rendezvous``:
    the directory where the diamond's branches meet."""
    unary(repository, "pre", "x + 1")
    unary(repository, "double", "x * 2")
    unary(repository, "post", "x - 3")
    write(repository, "pipeline", PIPELINE_CONFIG)
    meeting = f'parameters {{ key: "rendezvous" value: {{ string_value: "{rendezvous}" }} }}'
    for name, other, factor in (("left", "right", 10), ("right", "left", 100)):
        write(
            repository,
            name,
            UNARY_CONFIG.format(extra=meeting),
            BRANCH_PY.format(name=name, other=other, factor=factor),
        )
    write(repository, "join", JOIN_CONFIG, JOIN_PY)
    write(repository, "diamond", DIAMOND_CONFIG)
    return repository


BLS_PY = """
import asyncio

import numpy as np
import triton_python_backend_utils as pb_utils


def call(model, x, out="OUT", **options):
    return pb_utils.InferenceRequest(
        model_name=model,
        requested_output_names=[out],
        inputs=[pb_utils.Tensor("IN", x)],
        **options,
    )


def answer(y):
    return pb_utils.InferenceResponse([pb_utils.Tensor("OUT", np.asarray(y, np.float32))])


class TritonPythonModel:
    {body}
"""

BLS_SYNC = """
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            response = call("pre", x).exec()
            if response.has_error():
                responses.append(pb_utils.InferenceResponse(error=response.error()))
                continue
            prepared = pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy()
            doubled = call("double", prepared).exec()
            responses.append(answer(pb_utils.get_output_tensor_by_name(doubled, "OUT").as_numpy()))
        return responses
"""

BLS_ASYNC = """
    async def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            pre, double = await asyncio.gather(
                call("pre", x).async_exec(), call("double", x).async_exec()
            )
            y = sum(pb_utils.get_output_tensor_by_name(r, "OUT").as_numpy() for r in (pre, double))
            responses.append(answer(y))
        return responses
"""

BLS_DECOUPLED = """
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().astype(np.int32)
            total = 0
            for response in call("repeat", x).exec(decoupled=True):
                if response.has_error():
                    raise pb_utils.TritonModelException(response.error().message())
                out = pb_utils.get_output_tensor_by_name(response, "OUT")
                if out is not None:
                    total += int(out.as_numpy().sum())
            responses.append(answer([total]))
        return responses
"""


BLS_ASYNC_DECOUPLED = """
    async def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy().astype(np.int32)
            total, count = 0, 0
            for response in await call("repeat", x).async_exec(decoupled=True):
                if response.has_error():
                    raise pb_utils.TritonModelException(response.error().message())
                count += 1
                out = pb_utils.get_output_tensor_by_name(response, "OUT")
                if out is not None:
                    total += int(out.as_numpy().sum())
            responses.append(answer([total, count]))
        return responses
"""


BLS_ROWS = """
    def execute(self, requests):
        responses = []
        for request in requests:
            rows = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            posted = []
            for row in rows:
                response = call("post", row).exec()
                if response.has_error():
                    break
                posted.append(pb_utils.get_output_tensor_by_name(response, "OUT").as_numpy())
            if response.has_error():
                responses.append(pb_utils.InferenceResponse(error=response.error()))
            else:
                responses.append(answer(np.stack(posted)))
        return responses
"""

BATCHED_CONFIG = """
backend: "python"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
dynamic_batching { max_queue_delay_microseconds: 2000 }
"""

SEQUENCE_CONFIG = """
backend: "python"
max_batch_size: 8
input [ { name: "IN" data_type: TYPE_FP32 dims: [ -1 ] } ]
output [ { name: "OUT" data_type: TYPE_FP32 dims: [ -1 ] } ]
sequence_batching { }
"""


def write_bls_models(repository: Path) -> Path:
    """Six BLS callers of the pipeline's models (``write_pipeline_repository``) and of
    ``repeat`` (decoupled): ``bls_sync`` (double(pre(x)), pre's error passed on),
    ``bls_async`` (pre(x) + double(x), awaited together), ``bls_decoupled`` (the sum of
    repeat's responses), ``bls_async_decoupled`` (that sum awaited, and how many responses
    came, the final empty one counted), ``bls_batched`` (dynamic batching: post of each row,
    from the batch's thread) and ``bls_sequence`` (a sequence model: the same, from its
    instance's thread)."""
    from tests.triton.python_models import write_repeat

    write_repeat(repository)
    for name, config, body in (
        ("bls_sync", UNARY_CONFIG.format(extra=""), BLS_SYNC),
        ("bls_async", UNARY_CONFIG.format(extra=""), BLS_ASYNC),
        ("bls_decoupled", UNARY_CONFIG.format(extra=""), BLS_DECOUPLED),
        ("bls_async_decoupled", UNARY_CONFIG.format(extra=""), BLS_ASYNC_DECOUPLED),
        ("bls_batched", BATCHED_CONFIG, BLS_ROWS),
        ("bls_sequence", SEQUENCE_CONFIG, BLS_ROWS),
    ):
        write(repository, name, config, BLS_PY.format(body=body.strip()))
    return repository


SLOW_PY = """
import time

import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        time.sleep(1.0)  # 20 times the BLS timeout of bls_timeout's call
        return [
            pb_utils.InferenceResponse([pb_utils.get_input_tensor_by_name(request, "IN")])
            for request in requests
        ]
"""

BLS_TIMEOUT = """
    def execute(self, requests):
        responses = []
        for request in requests:
            x = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            late = call("slow", x, timeout=50_000).exec()
            timed_out = late.has_error() and "Deadline exceeded" in late.error().message()
            doubled = call("double", x).exec()
            y = pb_utils.get_output_tensor_by_name(doubled, "OUT").as_numpy()
            responses.append(answer(np.concatenate([[float(timed_out)], y])))
        return responses
"""


def write_bls_timeout_models(repository: Path) -> Path:
    """``slow`` (its input back, after a second) and ``bls_timeout``, which calls it with a
    50 ms BLS timeout, then the pipeline's ``double``: [1 if slow's call failed on its
    deadline, else 0, *double(x)]."""
    write(repository, "slow", UNARY_CONFIG.format(extra=""), SLOW_PY)
    body = BLS_PY.format(body=BLS_TIMEOUT.strip())
    write(repository, "bls_timeout", UNARY_CONFIG.format(extra=""), body)
    return repository
