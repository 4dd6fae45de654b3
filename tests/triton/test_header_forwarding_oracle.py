"""Differential tests: headers forwarded to a Python model as request parameters, as Triton does.

Triton runs with ``--http-header-forward-pattern`` / ``--grpc-header-forward-pattern`` and
servinglib's CLI with the same patterns (``--http_header_forward_pattern``, ...); the recorder
model answers the parameters ``execute`` saw.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tests.server.cli.test_model_server import Server
from tests.triton.clients import PROTOCOLS, Clients
from tests.triton.oracle import running_triton, skip_without_triton
from tests.triton.python_models import write_recorder

pytestmark = pytest.mark.timeout(300)

PATTERN = "my_header.*"
HEADERS = {"my_header_1": "one", "x-my_header_2": "two", "other": "three"}
STRINGS = np.array([b"x"], dtype=object)


@pytest.fixture(scope="module")
def clients(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Clients]]:
    """Clients of Triton and of servinglib's CLI, both forwarding headers matching PATTERN."""
    skip_without_triton()
    repository = tmp_path_factory.mktemp("repository")
    write_recorder(repository)
    options = [
        f"--http-header-forward-pattern={PATTERN}",
        f"--grpc-header-forward-pattern={PATTERN}",
    ]
    server = Server(
        f"--model_repository={repository}",
        "--allow_python_code_execution",
        f"--http_header_forward_pattern={PATTERN}",
        f"--grpc_header_forward_pattern={PATTERN}",
        "--http_restricted_api=statistics:authorization=my_header_secret",
    )
    try:
        server.wait_ready()
        with (
            running_triton(repository, tmp_path_factory.mktemp("work"), options) as triton,
            Clients(triton.http_url, triton.grpc_url) as theirs,
            Clients(f"127.0.0.1:{server.rest_port}", f"127.0.0.1:{server.grpc_port}") as ours,
        ):
            yield {"theirs": theirs, "ours": ours}
    finally:
        server.close()


def _parameters(answer: dict[str, Any]) -> dict[str, Any]:
    parameters: dict[str, Any] = json.loads(answer["outputs"]["REQUEST"][0])["parameters"]
    return parameters


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_matching_headers_reach_the_model_as_parameters_alike(
    clients: dict[str, Clients], protocol: str
) -> None:
    """my_header_1 and x-my_header_2 arrive beside the body's parameter; other does not."""
    seen = {
        server: _parameters(
            client.infer(
                protocol,
                "recorder",
                {"IN": STRINGS},
                outputs=["REQUEST"],
                headers=dict(HEADERS),  # tritonclient.http adds its own to the dict
                parameters={"p": 1},
            )
        )
        for server, client in clients.items()
    }
    assert seen["ours"] == seen["theirs"]
    assert seen["ours"] == {"p": 1, "my_header_1": "one", "x-my_header_2": "two"}


def test_a_streams_metadata_reaches_each_of_its_requests_alike(
    clients: dict[str, Clients],
) -> None:
    """ModelStreamInfer: the stream's metadata is forwarded to every request on it."""
    seen = {
        server: [
            _parameters(a)
            for a in client.stream("recorder", {"IN": STRINGS}, headers=dict(HEADERS))
        ]
        for server, client in clients.items()
    }
    assert seen["ours"] == seen["theirs"]
    assert seen["ours"] == [{"my_header_1": "one", "x-my_header_2": "two"}]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_credential_header_is_never_forwarded(clients: dict[str, Clients], protocol: str) -> None:
    """A header that is a restricted group's credential stays out of the model's parameters,
    even where the pattern matches its name (servinglib only: Triton forwards it)."""
    key = "authorization" if protocol == "http" else "triton-grpc-protocol-authorization"
    answer = clients["ours"].infer(
        protocol,
        "recorder",
        {"IN": STRINGS},
        outputs=["REQUEST"],
        headers={"my_header_ok": "yes", key: "my_header_secret"},
    )
    assert _parameters(answer) == {"my_header_ok": "yes"}
