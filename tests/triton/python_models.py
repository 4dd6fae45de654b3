"""Triton Python-backend models written as Triton's docs show, for our server and the oracle.

Each ``write_*`` writes one model into a repository and returns its directory; the same
repository is served by servinglib and by Triton in the differential tests.
"""

from __future__ import annotations

from pathlib import Path

from tests.triton.oracle import write_add_sub

__all__ = [
    "write_add_sub",
    "write_auto_complete",
    "write_batch_recorder",
    "write_bytes_echo",
    "write_errors",
    "write_recorder",
    "write_repeat",
    "write_repository",
]

RECORDER_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "IN" data_type: TYPE_STRING dims: [ 1 ] } ]
output [
  { name: "ARGS" data_type: TYPE_STRING dims: [ 1 ] },
  { name: "REQUEST" data_type: TYPE_STRING dims: [ 1 ] }
]
parameters { key: "greeting" value: { string_value: "hello" } }
"""

RECORDER_MODEL_PY = """
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.args = dict(args)
        pb_utils.Logger.log_info("recorder initialized")

    def execute(self, requests):
        responses = []
        for request in requests:
            seen = {
                "request_id": request.request_id(),
                "correlation_id": request.correlation_id(),
                "parameters": json.loads(request.parameters()),
                "requested_output_names": sorted(request.requested_output_names()),
                "is_cancelled": request.is_cancelled(),
            }
            outputs = [
                pb_utils.Tensor("ARGS", np.array([json.dumps(self.args).encode()], dtype=object)),
                pb_utils.Tensor("REQUEST", np.array([json.dumps(seen).encode()], dtype=object)),
            ]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
"""
"""Answers ``initialize``'s args and what it saw of each request, as JSON strings."""

ERRORS_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "CODE" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [ { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
"""

ERRORS_MODEL_PY = """
import triton_python_backend_utils as pb_utils

# TritonError's codes by number (Triton's Python backend adds its C++ classes to the module
# only after model.py is imported: use them inside the methods).
CODE_NAMES = [
    "UNKNOWN", "INTERNAL", "NOT_FOUND", "INVALID_ARG", "UNAVAILABLE", "UNSUPPORTED",
    "ALREADY_EXISTS", "CANCELLED",
]


class TritonPythonModel:
    def execute(self, requests):
        responses = []
        for request in requests:
            code = int(pb_utils.get_input_tensor_by_name(request, "CODE").as_numpy()[0])
            if code == -1:
                raise pb_utils.TritonModelException("execute gave up")
            if code == -2:
                error = pb_utils.TritonError("no code given")
                responses.append(pb_utils.InferenceResponse(error=error))
            elif 0 <= code < len(CODE_NAMES):
                triton_code = getattr(pb_utils.TritonError, CODE_NAMES[code])
                error = pb_utils.TritonError(f"failed with code {code}", triton_code)
                responses.append(pb_utils.InferenceResponse(error=error))
            else:
                out = pb_utils.Tensor("OUT", request.inputs()[0].as_numpy() * 2)
                responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
        return responses
"""
"""CODE 0..7 fail with that TritonError code, -1 raises from execute, -2 errs with no code;
others answer OUT = 2 * CODE."""

AUTO_COMPLETE_MODEL_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    @staticmethod
    def auto_complete_config(auto_complete_model_config):
        auto_complete_model_config.add_input(
            {"name": "X", "data_type": "TYPE_FP32", "dims": [2]}
        )
        auto_complete_model_config.add_output(
            {"name": "Y", "data_type": "TYPE_FP32", "dims": [2]}
        )
        auto_complete_model_config.set_max_batch_size(4)
        return auto_complete_model_config

    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                output_tensors=[
                    pb_utils.Tensor(
                        "Y", pb_utils.get_input_tensor_by_name(r, "X").as_numpy() + np.float32(1)
                    )
                ]
            )
            for r in requests
        ]
"""
"""No config.pbtxt: its ``auto_complete_config`` declares X and Y, [batch, 2] FP32; Y = X + 1."""

BYTES_CONFIG = """
backend: "python"
max_batch_size: 0
input [ { name: "TEXT" data_type: TYPE_STRING dims: [ -1 ] } ]
output [
  { name: "UPPER" data_type: TYPE_STRING dims: [ -1 ] },
  { name: "LENGTH" data_type: TYPE_INT32 dims: [ -1 ] }
]
"""

BYTES_MODEL_PY = """
import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.length_dtype = pb_utils.triton_string_to_numpy("TYPE_INT32")

    def execute(self, requests):
        responses = []
        for request in requests:
            text = pb_utils.get_input_tensor_by_name(request, "TEXT").as_numpy()
            upper = np.array([item.upper() for item in text], dtype=np.object_)
            length = np.array([len(item) for item in text], dtype=self.length_dtype)
            outputs = [pb_utils.Tensor("UPPER", upper), pb_utils.Tensor("LENGTH", length)]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
"""
"""BYTES in (any length), BYTES and INT32 out: each item upper-cased, and its length."""

REPEAT_CONFIG = """
backend: "python"
max_batch_size: 0
model_transaction_policy { decoupled: true }
input [ { name: "IN" data_type: TYPE_INT32 dims: [ -1 ] } ]
output [
  { name: "OUT" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "IDX" data_type: TYPE_UINT32 dims: [ 1 ] }
]
"""

REPEAT_MODEL_PY = """
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.threads = []

    def execute(self, requests):
        for request in requests:
            values = pb_utils.get_input_tensor_by_name(request, "IN").as_numpy()
            thread = threading.Thread(
                target=self.respond, args=(request.get_response_sender(), values)
            )
            thread.start()
            self.threads.append(thread)
        return None

    def respond(self, sender, values):
        for index, value in enumerate(values):
            outputs = [
                pb_utils.Tensor("OUT", np.array([value], dtype=np.int32)),
                pb_utils.Tensor("IDX", np.array([index], dtype=np.uint32)),
            ]
            sender.send(pb_utils.InferenceResponse(output_tensors=outputs))
        sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)

    def finalize(self):
        for thread in self.threads:
            thread.join()
"""
"""Decoupled: one response per element of IN (OUT the element, IDX its index), sent from a
thread after ``execute`` returned, then the final flag alone."""


def _write(repository: Path, name: str, config: str | None, model_py: str) -> Path:
    model = repository / name
    (model / "1").mkdir(parents=True)
    if config is not None:
        (model / "config.pbtxt").write_text(config, encoding="utf-8")
    (model / "1" / "model.py").write_text(model_py, encoding="utf-8")
    return model


def write_recorder(repository: Path, name: str = "recorder") -> Path:
    """Writes the recorder model (initialize's args, each request's view); its directory."""
    return _write(repository, name, RECORDER_CONFIG, RECORDER_MODEL_PY)


def write_errors(repository: Path, name: str = "errors") -> Path:
    """Writes the errors model (a TritonError per CODE); its directory."""
    return _write(repository, name, ERRORS_CONFIG, ERRORS_MODEL_PY)


def write_auto_complete(repository: Path, name: str = "auto") -> Path:
    """Writes a model with no config.pbtxt that declares its tensors itself; its directory."""
    return _write(repository, name, None, AUTO_COMPLETE_MODEL_PY)


def write_bytes_echo(repository: Path, name: str = "bytes_echo") -> Path:
    """Writes the BYTES model (upper-case and length); its directory."""
    return _write(repository, name, BYTES_CONFIG, BYTES_MODEL_PY)


def write_repeat(repository: Path, name: str = "repeat") -> Path:
    """Writes the decoupled repeat model; its directory."""
    return _write(repository, name, REPEAT_CONFIG, REPEAT_MODEL_PY)


BATCH_RECORDER_CONFIG = """
backend: "python"
max_batch_size: 8
input [ { name: "X" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "Y" data_type: TYPE_INT32 dims: [ 1 ] },
  { name: "SEEN" data_type: TYPE_STRING dims: [ 1 ] }
]
"""

BATCH_RECORDER_MODEL_PY = """
import json
import threading

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        self.gate = threading.Event()  # tests in process hold execute() here
        self.gate.set()
        self.entered = threading.Event()
        self.batches = []  # (requests, rows) of each execute()
        self.orders = []  # each execute()'s requests, by their first X

    def execute(self, requests):
        self.entered.set()
        self.gate.wait(30)
        inputs = [pb_utils.get_input_tensor_by_name(r, "X").as_numpy() for r in requests]
        rows = sum(x.shape[0] for x in inputs)
        self.batches.append((len(requests), rows))
        self.orders.append([int(x.reshape(-1)[0]) for x in inputs])
        responses = []
        for request, x in zip(requests, inputs):
            if (x < 0).any():
                error = pb_utils.TritonError("negative input")
                responses.append(pb_utils.InferenceResponse(error=error))
                continue
            seen = {
                "requests": len(requests),
                "rows": rows,
                "parameters": json.loads(request.parameters()),
                "outputs": sorted(request.requested_output_names()),
            }
            text = np.array([[json.dumps(seen).encode()]] * x.shape[0], dtype=object)
            outputs = [pb_utils.Tensor("Y", x * 2), pb_utils.Tensor("SEEN", text)]
            responses.append(pb_utils.InferenceResponse(output_tensors=outputs))
        return responses
"""
"""Doubles X, answers what execute() saw (its list's length and rows, each request's
parameters and requested outputs), fails a request with a negative X alone; records
``batches`` and ``orders`` and can be held at ``gate``."""


def write_batch_recorder(
    repository: Path,
    dynamic_batching: str = "",
    name: str = "batch_recorder",
    instances: int = 1,
    *,
    optional_b: bool = False,
) -> Path:
    """Writes the batch recorder with ``dynamic_batching { <dynamic_batching> }`` and
    ``instances`` CPU instances (``optional_b``: with an optional input B it ignores); its
    directory."""
    config = BATCH_RECORDER_CONFIG + f"dynamic_batching {{ {dynamic_batching} }}\n"
    if optional_b:
        config += 'input [ { name: "B" data_type: TYPE_INT32 dims: [ 1 ] optional: true } ]\n'
    config += f"instance_group [ {{ count: {instances} kind: KIND_CPU }} ]\n"
    return _write(repository, name, config, BATCH_RECORDER_MODEL_PY)


def write_repository(repository: Path) -> list[str]:
    """Writes every model above into ``repository``; their names."""
    writers = (
        write_add_sub,
        write_recorder,
        write_errors,
        write_auto_complete,
        write_bytes_echo,
        write_repeat,
    )
    return [writer(repository).name for writer in writers]
