"""Triton 2.51 and servinglib serve one repository of ensembles and BLS models alike: the same
outputs over REST and gRPC and the same statistics counts, per ensemble and per step model.

Where Triton 2.51 is weaker than servinglib (a failing step not named, a callee's error code
turned into INTERNAL, a failed ensemble request counted twice, a load error's reason only in
its log, no word of a cycle), the test says so and pins our stricter answer beside Triton's.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from servinglib.errors import InvalidArgumentError
from servinglib.server import ModelServerConfig
from servinglib.server.triton_repository import TritonRepository
from tests.triton.clients import PROTOCOLS, Answer, Clients
from tests.triton.oracle import running_triton, skip_without_triton
from tests.triton.pipeline_models import unary, write, write_bls_models, write_pipeline_repository
from tests.triton.servinglib_serving import serving_repository

X = np.array([1.0, 2.0], np.float32)
MODELS = (
    "pipeline",
    "pre",
    "double",
    "post",
    "diamond",
    "left",
    "right",
    "join",
    "bls_sync",
    "bls_async",
    "bls_decoupled",
    "bls_async_decoupled",
    "bls_batched",
    "bls_sequence",
)
"""Every model of the repository but ``repeat`` (see test_a_decoupled_callee_is_counted)."""

Counts = dict[str, dict[str, int]]


def succeeding(protocol: str) -> dict[str, dict[str, Any]]:
    """The requests that succeed, by model (the diamond's token differs per protocol, so that
    its branches meet only their own request's)."""
    token = 5.0 if protocol == "http" else 6.0
    return {
        "pipeline": {"INPUT": X},
        "diamond": {"INPUT": np.array([token], np.float32)},
        "bls_sync": {"IN": X},
        "bls_async": {"IN": X},
        "bls_decoupled": {"IN": np.array([3, 4, 5], np.float32)},
        "bls_async_decoupled": {"IN": np.array([3, 4, 5], np.float32)},
        "bls_batched": {"IN": np.array([X, X + 1], np.float32)},
        "bls_sequence": {"IN": np.array([X], np.float32)},
    }


OPTIONS = {"bls_sequence": {"sequence_id": 7, "sequence_start": True, "sequence_end": True}}
"""More of a request to a model than its inputs."""


FAILING = {
    "pipeline": {"INPUT": np.array([-5.0], np.float32)},  # step 0 (pre) refuses a negative
    "bls_sync": {"IN": np.array([-1.0], np.float32)},  # its callee pre refuses it
}


@dataclass(frozen=True)
class Exchange:
    """One server's answers and statistics counts, after the succeeding requests and after
    the failing ones."""

    answers: dict[tuple[str, str], Answer]
    counts: Counts
    failures: dict[tuple[str, str], Answer]
    counts_after_failures: Counts


def exchange(clients: Clients) -> Exchange:
    """The succeeding requests over both protocols, the statistics, the failing requests over
    both protocols, the statistics."""
    answers = {
        (protocol, model): clients.infer(protocol, model, inputs, **OPTIONS.get(model, {}))
        for protocol in PROTOCOLS
        for model, inputs in succeeding(protocol).items()
    }
    counts = settled_counts(clients, (*MODELS, "repeat"))
    failures = {
        (protocol, model): clients.infer(protocol, model, inputs)
        for protocol in PROTOCOLS
        for model, inputs in FAILING.items()
    }
    return Exchange(answers, counts, failures, settled_counts(clients, MODELS))


def settled_counts(clients: Clients, models: tuple[str, ...]) -> Counts:
    """:func:`statistics_counts` once two reads 50 ms apart agree: Triton counts a request
    after its response is sent, so a read right after the answer may miss it (seen on a
    loaded machine)."""
    counts = statistics_counts(clients, models)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        time.sleep(0.05)  # another server's counters: no event to wait on
        again = statistics_counts(clients, models)
        if again == counts:
            break
        counts = again
    return counts


def statistics_counts(clients: Clients, models: tuple[str, ...]) -> Counts:
    """Each model's counts (durations differ between servers), server-wide over REST."""
    counts = {}
    for name in models:
        (statistics,) = clients.http.get_inference_statistics(name, "1")["model_stats"]
        inference = statistics["inference_stats"]
        counts[name] = {
            "inference_count": int(statistics["inference_count"]),
            "execution_count": int(statistics["execution_count"]),
            **{f"{stage}.count": int(inference[stage]["count"]) for stage in sorted(inference)},
        }
    return counts


@pytest.fixture(scope="module")
def exchanges(tmp_path_factory: pytest.TempPathFactory) -> tuple[Exchange, Exchange]:
    """Triton's exchange and servinglib's, with the same repository (the chain, the diamond and
    the BLS callers), each with a fresh rendezvous for the diamond's branches."""
    skip_without_triton()
    repository = tmp_path_factory.mktemp("repository")
    rendezvous = tmp_path_factory.mktemp("rendezvous")
    write_pipeline_repository(repository, rendezvous)
    write_bls_models(repository)
    workdir = tmp_path_factory.mktemp("triton")
    with (
        running_triton(repository, workdir) as triton,
        Clients(triton.http_url, triton.grpc_url) as clients,
    ):
        theirs = exchange(clients)
    shutil.rmtree(rendezvous)
    rendezvous.mkdir()
    config = ModelServerConfig(TritonRepository(repository).scan().models)
    with (
        serving_repository(repository, config=config) as serving,
        Clients(serving.http_url, serving.grpc_url) as clients,
    ):
        ours = exchange(clients)
    return theirs, ours


def test_ensembles_and_bls_answer_as_triton(exchanges: tuple[Exchange, Exchange]) -> None:
    """The chain, the diamond (its branches met), BLS sync, async, decoupled and async
    decoupled, BLS from a dynamically batched and from a sequence model (their execute runs
    on a thread of their own): the same outputs over REST and gRPC."""
    theirs, ours = exchanges
    assert ours.answers == theirs.answers
    assert ours.answers["grpc", "diamond"] == {"outputs": {"OUTPUT": [660.0]}}
    assert ours.answers["http", "bls_batched"] == {"outputs": {"OUT": [[-2.0, -1.0], [-1.0, 0.0]]}}
    assert ours.answers["grpc", "bls_sequence"] == {"outputs": {"OUT": [[-2.0, -1.0]]}}


def test_statistics_count_each_ensemble_and_step_model_as_triton(
    exchanges: tuple[Exchange, Exchange],
) -> None:
    """Per ensemble, per step model and per BLS caller and callee: the same success, queue,
    compute, inference and execution counts (an ensemble request counts once for it and once
    for each of its steps; a BLS call once for its callee)."""
    theirs, ours = exchanges
    mine = {name: ours.counts[name] for name in MODELS}
    assert mine == {name: theirs.counts[name] for name in MODELS}
    assert mine["pipeline"]["success.count"] == 2
    assert mine["pre"]["success.count"] == 6  # the chain's, bls_sync's and bls_async's
    assert mine["join"]["execution_count"] == 2


def test_a_decoupled_callee_is_counted(exchanges: tuple[Exchange, Exchange]) -> None:
    """repeat, called by bls_decoupled and bls_async_decoupled once per protocol each,
    counts four requests on both."""
    theirs, ours = exchanges
    assert theirs.counts["repeat"]["success.count"] == 4
    assert ours.counts["repeat"] == theirs.counts["repeat"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_failing_step_has_the_same_code_and_is_named_where_triton_does_not(
    exchanges: tuple[Exchange, Exchange], protocol: str
) -> None:
    """Both answer the step's INVALID_ARG; Triton 2.51 says only "in ensemble 'pipeline'",
    we are stricter: the step and its model are named."""
    theirs, ours = (e.failures[protocol, "pipeline"] for e in exchanges)
    assert ours["error"] == theirs["error"]
    assert theirs["message"] == "in ensemble 'pipeline', negative input"
    assert ours["message"] == "Ensemble pipeline: step 0 (model pre) failed: negative input"


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_callees_error_keeps_its_code_where_triton_says_internal(
    exchanges: tuple[Exchange, Exchange], protocol: str
) -> None:
    """bls_sync passes pre's error on: the same message; Triton 2.51 turns its INVALID_ARG into
    INTERNAL, we keep it (as the Python backend does since its 2025 fix)."""
    theirs, ours = (e.failures[protocol, "bls_sync"] for e in exchanges)
    assert ours["message"] == theirs["message"] == "negative input"
    assert theirs["error"] in {"500", "StatusCode.INTERNAL"}
    assert ours["error"] in {"400", "StatusCode.INVALID_ARGUMENT"}


def test_a_failed_request_counts_once_as_a_failure(exchanges: tuple[Exchange, Exchange]) -> None:
    """Two failed requests of the chain and two of bls_sync: we count each once in ``fail``
    of the ensemble, of the caller and of the step model that failed; Triton 2.51 counts the
    ensemble's twice each and a Python model's error response as a success (a failure to us).
    Neither server calls the steps after the failing one."""
    theirs, ours = exchanges

    def delta(e: Exchange, name: str, field: str) -> int:
        return e.counts_after_failures[name][field] - e.counts[name][field]

    assert [delta(ours, n, "fail.count") for n in ("pipeline", "bls_sync", "pre")] == [2, 2, 4]
    assert [delta(ours, n, "success.count") for n in ("pipeline", "bls_sync", "pre")] == [0, 0, 0]
    assert [delta(theirs, n, "fail.count") for n in ("pipeline", "bls_sync", "pre")] == [4, 0, 0]
    assert [delta(theirs, n, "success.count") for n in ("pipeline", "bls_sync", "pre")] == [0, 2, 4]
    for name in ("double", "post"):
        assert ours.counts_after_failures[name] == ours.counts[name]
        assert theirs.counts_after_failures[name] == theirs.counts[name]


ENSEMBLE = """
platform: "ensemble"
max_batch_size: 0
input [ {{ name: "INPUT" data_type: {input_type} dims: [ -1 ] }} ]
output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ -1 ] }} ]
ensemble_scheduling {{ step [ {steps} ] }}
"""


def step(model: str, reads: str, writes: str, model_input: str = "IN") -> str:
    """One step of ``model``: its ``model_input`` from ``reads``, its OUT to ``writes``."""
    return (
        f'{{ model_name: "{model}" model_version: -1 '
        f'input_map {{ key: "{model_input}" value: "{reads}" }} '
        f'output_map {{ key: "OUT" value: "{writes}" }} }}'
    )


BROKEN = {
    "ens_ghost": ("TYPE_FP32", [step("ghost", "INPUT", "OUTPUT")]),
    "ens_nowhere": ("TYPE_FP32", [step("pre", "nowhere", "OUTPUT")]),
    "ens_type": ("TYPE_INT32", [step("pre", "INPUT", "OUTPUT")]),
    "ens_input": ("TYPE_FP32", [step("pre", "INPUT", "OUTPUT", model_input="X")]),
    "ens_loop": ("TYPE_FP32", [step("pre", "OUTPUT", "mid"), step("double", "mid", "OUTPUT")]),
}
"""Ensembles that must not load: a missing step model, a tensor nobody makes, a type mismatch,
an input the step model lacks, a cycle."""

OUR_REASONS = {
    "ens_ghost": "step 0 (model ghost) names a model that is not in the repository",
    "ens_nowhere": "step 0 (model pre) reads tensor nowhere, which no step and no input makes",
    "ens_type": "tensor INPUT is int32 from its input but step 0 (model pre) takes float32",
    "ens_input": "step 0 (model pre) maps input X, which its model does not have",
    "ens_loop": "its steps form a cycle: step 0 (model pre) -> step 1 (model double) -> "
    "step 0 (model pre)",
}

THEIR_LOG_LINES = {
    "ens_ghost": "ensemble ens_ghost contains models that are not available or ambiguous: ghost",
    "ens_nowhere": "ensemble input 'INPUT' for ensemble ens_nowhere' is not used",
    "ens_type": "in ensemble ens_type, ensemble tensor INPUT: inconsistent data type",
    "ens_input": "ensemble tensor INPUT is mapping to non-existing input X in model pre",
    "ens_loop": "ensemble input 'INPUT' for ensemble ens_loop' is not used",
}


def test_load_errors_are_named_where_triton_logs_them(tmp_path: Path) -> None:
    """Neither server serves a broken ensemble; Triton 2.51 gives its reason only in its log
    (its repository index has neither state nor reason) and says of a cycle or of a tensor
    nobody makes only that the input is unused; we are stricter: one line per ensemble names
    the fault, in the error that refuses the repository."""
    skip_without_triton()
    repository = tmp_path / "repository"
    unary(repository, "pre", "x + 1")
    unary(repository, "double", "x * 2")
    for name, (input_type, steps) in BROKEN.items():
        write(repository, name, ENSEMBLE.format(input_type=input_type, steps=", ".join(steps)))
    workdir = tmp_path / "triton"
    workdir.mkdir()
    with running_triton(repository, workdir, ["--exit-on-error=false"]) as triton:
        index = httpx.post(f"http://{triton.http_url}/v2/repository/index", json={}).json()
        log = triton.log_text()
    assert {entry["name"]: entry for entry in index if entry["name"] in BROKEN} == {
        name: {"name": name} for name in BROKEN
    }
    for name, line in THEIR_LOG_LINES.items():
        assert line in log, name
    assert not [line for line in log.splitlines() if "ens_loop" in line and "cycle" in line]
    config = ModelServerConfig(TritonRepository(repository).scan().models)
    with (
        pytest.raises(InvalidArgumentError) as refused,
        serving_repository(repository, config=config),
    ):
        pass
    for name, reason in OUR_REASONS.items():
        assert f"{name}: Ensemble {name}: {reason}" in str(refused.value), name
