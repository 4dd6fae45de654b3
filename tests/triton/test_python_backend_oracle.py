"""Differential tests: one repository of Python-backend models served by Triton and by servinglib.

The same requests go to both through tritonclient.http and .grpc; answers, status codes,
metadata, streams and what ``initialize`` and ``execute`` saw must agree.  Where they differ by
design, the difference is pinned here and told in docs/guides/triton-repository.md.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from tests.triton.clients import PROTOCOLS, Clients
from tests.triton.oracle import running_triton, skip_without_triton
from tests.triton.python_models import write_repository
from tests.triton.servinglib_serving import serving_repository

pytestmark = pytest.mark.timeout(300)

F32 = np.array([[1, 2, 3, 4], [10, 20, 30, 40]], dtype=np.float32)
ROWS_9 = np.ones((9, 4), np.float32)
STRINGS = np.array([b"x"], dtype=object)

# Triton's HTTP front end answers these TritonError codes with 400; servinglib's one HTTP table
# (TF Serving's) gives UNKNOWN 500, ALREADY_EXISTS 409 and CANCELLED 499.  gRPC codes agree.
HTTP_STATUS_DIFFERS = {0: ("400", "500"), 6: ("400", "409"), 7: ("400", "499")}


class Servers:
    """Clients of Triton (``theirs``) and of servinglib (``ours``) serving one repository."""

    def __init__(self, theirs: Clients, ours: Clients) -> None:
        self.theirs = theirs
        self.ours = ours

    def both(self, call: str, *args: Any, **kwargs: Any) -> tuple[Any, Any]:
        """The answers of Triton and of servinglib to the same call of :class:`Clients`."""
        return getattr(self.theirs, call)(*args, **kwargs), getattr(self.ours, call)(
            *args, **kwargs
        )


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """Triton and servinglib, each serving the repository of tests/triton/python_models.py."""
    skip_without_triton()
    repository = tmp_path_factory.mktemp("repository")
    write_repository(repository)
    work = tmp_path_factory.mktemp("work")
    with (
        running_triton(repository, work) as triton,
        serving_repository(repository) as serving,
        Clients(triton.http_url, triton.grpc_url) as theirs,
        Clients(serving.http_url, serving.grpc_url) as ours,
    ):
        yield Servers(theirs, ours)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    ("model", "inputs"),
    [
        ("add_sub", {"INPUT0": F32, "INPUT1": F32 * 2}),
        ("auto", {"X": np.array([[1, 2], [3, 4]], np.float32)}),
        ("bytes_echo", {"TEXT": np.array([b"ab", b"", "é".encode()], dtype=object)}),
        ("errors", {"CODE": np.array([21], np.int32)}),
    ],
)
def test_answers_agree(
    servers: Servers, protocol: str, model: str, inputs: dict[str, np.ndarray]
) -> None:
    """The same request gets the same outputs from both."""
    theirs, ours = servers.both("infer", protocol, model, inputs)

    assert "outputs" in theirs, theirs
    assert ours == theirs


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    "inputs",
    [
        {"INPUT0": F32, "INPUT1": F32, "EXTRA": F32},
        {"INPUT0": F32},
        {"INPUT0": F32.astype(np.int32), "INPUT1": F32},
        {"INPUT0": F32[:, :3], "INPUT1": F32},
        {"INPUT0": ROWS_9, "INPUT1": ROWS_9},
    ],
    ids=["unknown", "missing", "dtype", "shape", "batch-too-large"],
)
def test_requests_that_do_not_fit_fail_with_the_same_code(
    servers: Servers, protocol: str, inputs: dict[str, np.ndarray]
) -> None:
    """A request the config refuses fails with the same status on both (the texts differ)."""
    theirs, ours = servers.both("infer", protocol, "add_sub", inputs)

    assert "error" in theirs, theirs
    assert ours["error"] == theirs["error"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("code", [-2, *range(8)])
def test_triton_errors_fail_with_the_same_code_and_message(
    servers: Servers, protocol: str, code: int
) -> None:
    """A response's TritonError reaches the client with Triton's code and message."""
    theirs, ours = servers.both("infer", protocol, "errors", {"CODE": np.array([code], np.int32)})

    assert ours["message"] == theirs["message"]
    if protocol == "http" and code in HTTP_STATUS_DIFFERS:
        assert (theirs["error"], ours["error"]) == HTTP_STATUS_DIFFERS[code]
    else:
        assert ours["error"] == theirs["error"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_an_exception_from_execute_fails_alike(servers: Servers, protocol: str) -> None:
    """An exception from execute: the same code, and Triton's message before its traceback."""
    theirs, ours = servers.both("infer", protocol, "errors", {"CODE": np.array([-1], np.int32)})

    assert ours["error"] == theirs["error"]
    assert theirs["message"].startswith(ours["message"])


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_initialize_gets_the_same_args(servers: Servers, protocol: str) -> None:
    """initialize's args agree; the config JSON but for Triton's optimization defaults."""
    theirs, ours = servers.both("infer", protocol, "recorder", {"IN": STRINGS}, outputs=["ARGS"])
    their_args, our_args = (json.loads(a["outputs"]["ARGS"][0]) for a in (theirs, ours))
    their_config, our_config = (json.loads(a.pop("model_config")) for a in (their_args, our_args))
    del their_config["optimization"]

    assert our_args == their_args
    assert our_config == their_config


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_request_looks_the_same_to_the_model(servers: Servers, protocol: str) -> None:
    """request_id, parameters, requested outputs and the rest agree as execute sees them."""
    theirs, ours = servers.both(
        "infer",
        protocol,
        "recorder",
        {"IN": STRINGS},
        outputs=["REQUEST"],
        request_id="req-7",
        parameters={"p_str": "x", "p_int": 3, "p_bool": True},
    )

    assert json.loads(ours["outputs"]["REQUEST"][0]) == json.loads(theirs["outputs"]["REQUEST"][0])


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("model", ["add_sub", "auto", "bytes_echo", "repeat"])
def test_model_metadata_agrees(servers: Servers, protocol: str, model: str) -> None:
    """Inputs and outputs (names, datatypes, shapes with the batch dimension) agree."""
    theirs, ours = servers.both("metadata", protocol, model)

    assert ours == theirs


@pytest.mark.parametrize("values", [[5, 6, 7], []])
def test_a_decoupled_model_streams_the_same_responses(servers: Servers, values: list[int]) -> None:
    """ModelStreamInfer gets the same responses, in order, then the final flag."""
    theirs, ours = servers.both("stream", "repeat", {"IN": np.array(values, np.int32)})

    assert ours == theirs


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_decoupled_model_called_whole_is_refused_by_both(servers: Servers, protocol: str) -> None:
    """A unary call of a decoupled model fails on both; Triton says UNIMPLEMENTED (501),
    servinglib FAILED_PRECONDITION (400), naming the streaming calls."""
    theirs, ours = servers.both("infer", protocol, "repeat", {"IN": np.array([1], np.int32)})

    expected = {
        "http": ("501", "400"),
        "grpc": ("StatusCode.UNIMPLEMENTED", "StatusCode.FAILED_PRECONDITION"),
    }
    assert (theirs["error"], ours["error"]) == expected[protocol]
