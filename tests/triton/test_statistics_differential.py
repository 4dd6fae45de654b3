"""Triton 2.51 and servinglib count a request of several rows alike: as that many inferences
and one execution of that batch size, whichever scheduler runs it (the default one, in
``thread`` or ``inline`` mode, dynamic batching), and a request to a model without a batch
dimension as one inference, whatever its shape.  A sequence model takes one row a request."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from tests.triton.clients import PROTOCOLS, Clients
from tests.triton.oracle import running_triton, skip_without_triton
from tests.triton.pipeline_models import write
from tests.triton.servinglib_serving import serving_repository

IDENTITY_PY = """
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def execute(self, requests):
        return [
            pb_utils.InferenceResponse(
                [pb_utils.Tensor("OUT", pb_utils.get_input_tensor_by_name(r, "IN").as_numpy())]
            )
            for r in requests
        ]
"""

CONFIG = """
backend: "python"
max_batch_size: {max_batch_size}
input [ {{ name: "IN" data_type: TYPE_FP32 dims: [ 2 ] }} ]
output [ {{ name: "OUT" data_type: TYPE_FP32 dims: [ 2 ] }} ]
{extra}
"""

INLINE = 'parameters { key: "EXECUTION_MODE" value: { string_value: "inline" } }'
SEQUENCE = {"sequence_id": 11, "sequence_start": True, "sequence_end": True}
MODELS: dict[str, tuple[int, str, int, dict[str, Any]]] = {
    # name: max_batch_size, more of the config, rows a request (0: no batch dimension), more
    # of each request
    "rows_thread": (8, "", 3, {}),
    "rows_inline": (8, INLINE, 3, {}),
    "rows_dynamic": (8, "dynamic_batching { }", 3, {}),
    "rows_instances": (8, "instance_group [ { count: 2 kind: KIND_CPU } ]", 3, {}),
    "rows_sequence": (8, "sequence_batching { }", 1, SEQUENCE),
    "unbatched_thread": (0, "", 0, {}),
    "unbatched_sequence": (0, "sequence_batching { }", 0, SEQUENCE),
}
ROWS = np.arange(6, dtype=np.float32).reshape(3, 2)


def _counts(clients: Clients) -> dict[str, dict[str, Any]]:
    """Each model's answers to a request of three rows (two values for an unbatched model)
    over both protocols, and then its inference and execution counts and batch sizes."""
    seen: dict[str, dict[str, Any]] = {}
    for name, (_, _, rows, options) in MODELS.items():
        x = ROWS[:rows] if rows else ROWS[0]
        answers = [clients.infer(p, name, {"IN": x}, **options) for p in PROTOCOLS]
        seen[name] = {"answers": answers, **_settled_counts(clients, name)}
    return seen


def _settled_counts(clients: Clients, name: str) -> dict[str, Any]:
    """``name``'s counts once each request's execution is counted and two reads 100 ms apart
    agree: Triton counts a request after its response is sent, so a read right after the
    answer may miss it (seen under load)."""
    counts = _counts_now(clients, name)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(0.1)  # another server's counters: no event to wait on
        again = _counts_now(clients, name)
        if again == counts and counts["execution_count"] >= len(PROTOCOLS):
            break
        counts = again
    return counts


def _counts_now(clients: Clients, name: str) -> dict[str, Any]:
    (statistics,) = clients.http.get_inference_statistics(name, "1")["model_stats"]
    return {
        "inference_count": int(statistics["inference_count"]),
        "execution_count": int(statistics["execution_count"]),
        "batch_sizes": {
            int(b["batch_size"]): int(b["compute_infer"]["count"])
            for b in statistics["batch_stats"]
        },
    }


@pytest.fixture(scope="module")
def counts(tmp_path_factory: pytest.TempPathFactory) -> dict[Any, Any]:
    """Triton's counts and servinglib's, of one repository."""
    skip_without_triton()
    repository = tmp_path_factory.mktemp("repository")
    for name, (max_batch_size, extra, _, _) in MODELS.items():
        config = CONFIG.format(max_batch_size=max_batch_size, extra=extra)
        write(repository, name, config, IDENTITY_PY)
    found = {}
    with (
        running_triton(repository, tmp_path_factory.mktemp("triton")) as triton,
        Clients(triton.http_url, triton.grpc_url) as clients,
    ):
        found["theirs"] = _counts(clients)
        found["theirs", "refused"] = _refused(clients)
    with (
        serving_repository(repository) as serving,
        Clients(serving.http_url, serving.grpc_url) as clients,
    ):
        found["ours"] = _counts(clients)
        found["ours", "refused"] = _refused(clients)
    return found


def _refused(clients: Clients) -> list[dict[str, Any]]:
    """A sequence model's answers to a request of three rows, over both protocols."""
    return [clients.infer(p, "rows_sequence", {"IN": ROWS}, **SEQUENCE) for p in PROTOCOLS]


@pytest.mark.parametrize("model", sorted(MODELS))
def test_a_request_counts_its_rows_as_triton_does(counts: dict[Any, Any], model: str) -> None:
    """Three rows: three inferences, one execution of batch size 3, per request; an unbatched
    model's request: one of each (batch size 1)."""
    theirs, ours = counts["theirs"][model], counts["ours"][model]
    assert ours == theirs
    rows = MODELS[model][2] or 1
    assert ours["inference_count"] == 2 * rows
    assert ours["execution_count"] == 2
    assert ours["batch_sizes"] == {rows: 2}


def test_a_sequence_request_of_several_rows_is_refused_as_triton_does(
    counts: dict[Any, Any],
) -> None:
    """The sequence batcher takes one row a request: INVALID_ARGUMENT, Triton's words."""
    theirs, ours = counts["theirs", "refused"], counts["ours", "refused"]
    assert ours == theirs
    assert ours[0] == {
        "error": "400",
        "message": "inference request to model 'rows_sequence' must specify batch-size 1 due to "
        "requirements of sequence batcher",
    }
