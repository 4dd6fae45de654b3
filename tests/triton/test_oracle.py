"""Tests that the oracle, Triton Inference Server itself, serves a Python-backend repository."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import tritonclient.grpc
import tritonclient.http

from tests.triton.oracle import running_triton, skip_without_triton, write_add_sub

A = np.array([[1, 2, 3, 4], [10, 20, 30, 40]], dtype=np.float32)
B = np.array([[4, 3, 2, 1], [1, 1, 1, 1]], dtype=np.float32)


def test_triton_serves_add_sub_over_http_and_grpc(tmp_path: Path) -> None:
    """tritonserver answers add_sub's sum and difference to both official clients."""
    skip_without_triton()
    write_add_sub(tmp_path / "repository")
    (tmp_path / "work").mkdir()

    with running_triton(tmp_path / "repository", tmp_path / "work") as triton:
        for client_module, url in (
            (tritonclient.http, triton.http_url),
            (tritonclient.grpc, triton.grpc_url),
        ):
            client = client_module.InferenceServerClient(url)
            inputs = []
            for name, value in (("INPUT0", A), ("INPUT1", B)):
                tensor = client_module.InferInput(name, list(value.shape), "FP32")
                tensor.set_data_from_numpy(value)
                inputs.append(tensor)
            result = client.infer("add_sub", inputs)
            client.close()

            np.testing.assert_array_equal(result.as_numpy("OUTPUT0"), A + B)
            np.testing.assert_array_equal(result.as_numpy("OUTPUT1"), A - B)
