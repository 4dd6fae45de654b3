"""A Triton repository model's instance_group count over tritonclient: one process per instance."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http

from tests.server.cli.test_model_server import Server

CONFIG_PBTXT = """
backend: "python"
input [ { name: "MEET" data_type: TYPE_INT32 dims: [ 1 ] } ]
output [
  { name: "PID" data_type: TYPE_INT64 dims: [ 1 ] },
  { name: "NAME" data_type: TYPE_STRING dims: [ 1 ] }
]
instance_group [ { count: 2 kind: KIND_CPU } ]
"""

MODEL_PY = """
import os, time
import numpy as np
import triton_python_backend_utils as pb_utils

class TritonPythonModel:
    def initialize(self, args):
        self.name = args["model_instance_name"]
        self.dir = os.path.dirname(args["model_repository"])  # the repository

    def execute(self, requests):
        responses = []
        for request in requests:
            if pb_utils.get_input_tensor_by_name(request, "MEET").as_numpy()[0]:
                open(os.path.join(self.dir, f"met-{os.getpid()}"), "w").close()
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline and sum(
                    n.startswith("met-") for n in os.listdir(self.dir)
                ) < 2:
                    time.sleep(0.001)  # a condition the other instance makes true
            pid = pb_utils.Tensor("PID", np.array([os.getpid()], np.int64))
            name = pb_utils.Tensor("NAME", np.array([self.name.encode()], np.object_))
            responses.append(pb_utils.InferenceResponse([pid, name]))
        return responses
"""


def write_repository(tmp_path: Path) -> Path:
    """``tmp_path/repo`` holding the model ``counted`` (two instances); returns the repository."""
    model = tmp_path / "repo" / "counted"
    (model / "1").mkdir(parents=True)
    (model / "config.pbtxt").write_text(CONFIG_PBTXT, encoding="utf-8")
    (model / "1" / "model.py").write_text(MODEL_PY, encoding="utf-8")
    return tmp_path / "repo"


def meet(client: triton_http.InferenceServerClient) -> list[tuple[int, str]]:
    """Two calls at once (tritonclient.http's async_infer), each waiting for the other."""
    value = triton_http.InferInput("MEET", [1], "INT32")
    value.set_data_from_numpy(np.array([1], np.int32))
    calls = [client.async_infer("counted", [value]) for _ in range(2)]
    results = [call.get_result() for call in calls]
    return [(int(r.as_numpy("PID")[0]), r.as_numpy("NAME")[0].decode()) for r in results]


def test_two_instances_answer_from_two_processes_named_as_triton_names_them(
    tmp_path: Path,
) -> None:
    """count: 2 serves from two processes, initialized as counted_0_0 and counted_0_1 (Triton's
    names in group counted_0), running two calls at once; gRPC answers too; no warning."""
    server = Server(
        f"--model_repository={write_repository(tmp_path)}", "--allow_python_code_execution"
    )
    http = triton_http.InferenceServerClient(f"127.0.0.1:{server.rest_port}", concurrency=4)
    grpc = triton_grpc.InferenceServerClient(f"127.0.0.1:{server.grpc_port}")
    try:
        server.wait_ready()
        met = meet(http)
        assert len({pid for pid, _ in met}) == 2  # each waited for the other: they overlapped
        assert sorted(name for _, name in met) == ["counted_0_0", "counted_0_1"]
        value = triton_grpc.InferInput("MEET", [1], "INT32")
        value.set_data_from_numpy(np.array([0], np.int32))
        pid = int(grpc.infer("counted", [value]).as_numpy("PID")[0])
        assert pid in {pid for pid, _ in met}
        stats = http.get_inference_statistics("counted")["model_stats"][0]
        assert stats["inference_count"] == 3
    finally:
        http.close()
        grpc.close()
        server.close()
    assert "instance_group" not in server.output()
