"""Fuzzing: generated malformed requests never get a 5xx, and the app keeps answering."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from servinglib.server.rest import RestApp

PATHS = [
    "/v1/models/toy:predict",
    "/v1/models/toy:classify",
    "/v1/models/toy:regress",
    "/v1/models/half_plus_two:predict",
    "/v1/models/half_plus_two/versions/1:classify",
    "/v1/models/half_plus_two/labels/stable:regress",
    "/v2/models/toy/infer",
    "/v2/models/py_half_plus_two/versions/1/infer",
    "/v2/repository/index",
]
SIGNATURES = [
    "serving_default",
    "strings",
    "inline",
    "scalar",
    "all_types",
    "classify_labels",
    "classify_x_to_y",
    "regress_x_to_y",
    "nope",
    "",
]
DATATYPES = ["BOOL", "INT8", "UINT64", "FP16", "BF16", "FP32", "FP64", "BYTES", "FP8", "", "fp32"]
NAMES = ["x", "a", "b", "text", "bytes", "fp32", "bf16", "inputs", "z", ""]

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=8)
    | st.builds(lambda s: {"b64": s}, st.text(max_size=8))
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=20,
)
nested_numbers = st.recursive(
    st.integers(-300, 300) | st.floats(allow_nan=True, allow_infinity=True) | st.booleans(),
    lambda inner: st.lists(inner, max_size=3),
    max_leaves=12,
)
v2_inputs = st.lists(
    st.fixed_dictionaries(
        {
            "name": st.sampled_from(NAMES),
            "datatype": st.sampled_from(DATATYPES),
            "shape": st.lists(st.integers(-2, 4), max_size=3) | json_values,
        },
        optional={
            "data": nested_numbers | json_values,
            "parameters": st.fixed_dictionaries(
                {"binary_data_size": st.integers(-1, 40) | json_values}
            )
            | json_values,
        },
    ),
    max_size=3,
)
bodies = st.fixed_dictionaries(
    {},
    optional={
        "signature_name": st.sampled_from(SIGNATURES) | json_values,
        "instances": st.lists(nested_numbers | json_values, max_size=4) | json_values,
        "inputs": v2_inputs | nested_numbers | json_values,
        "examples": st.lists(st.dictionaries(st.sampled_from(NAMES), json_values), max_size=3)
        | json_values,
        "context": st.dictionaries(st.sampled_from(NAMES), json_values) | json_values,
        "outputs": st.lists(
            st.fixed_dictionaries(
                {"name": st.sampled_from(NAMES)}, optional={"parameters": json_values}
            ),
            max_size=2,
        )
        | json_values,
        "parameters": st.fixed_dictionaries(
            {},
            optional={
                "signature_name": st.sampled_from(SIGNATURES),
                "binary_data_output": json_values,
            },
        )
        | json_values,
        "id": json_values,
    },
)


def encode(body: Any, tail: bytes, header_length: int | None) -> tuple[bytes, dict[str, str]]:
    raw = json.dumps(body).encode()
    headers = {}
    if header_length is not None:
        headers["Inference-Header-Content-Length"] = str(
            len(raw) if header_length == 0 else header_length
        )
    return raw + tail, headers


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """One event loop for every generated request of the module."""
    loop = asyncio.new_event_loop()
    yield loop
    loop.close()


def post(
    app: RestApp,
    loop: asyncio.AbstractEventLoop,
    path: str,
    content: bytes,
    headers: dict[str, str],
) -> httpx.Response:
    async def send() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://fuzz.test") as client:
            return await client.post(path, content=content, headers=headers)

    return loop.run_until_complete(send())


# The strategies draw nothing from the random module; a thread of the session's servers that
# does (once, in CI, 2026-11-28) moved its state while Hypothesis generated, which it reports
# as this deprecation. What the test pins is the status codes.
@pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisDeprecationWarning")
@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=st.tuples(
        st.sampled_from(PATHS), bodies, st.binary(max_size=24), st.none() | st.integers(-5, 300)
    )
)
def test_structured_malformed_bodies_get_4xx(
    app: RestApp, loop: asyncio.AbstractEventLoop, case: tuple[str, Any, bytes, int | None]
) -> None:
    """Bodies shaped like real requests, with wrong parts, are answered below 500 with JSON."""
    path, body, tail, header_length = case
    content, headers = encode(body, tail if header_length is not None else b"", header_length)
    response = post(app, loop, path, content, headers)
    assert response.status_code < 500, (path, content, response.text)
    if response.status_code >= 400:
        assert isinstance(response.json()["error"], str)


@settings(max_examples=300, deadline=None)
@given(path=st.sampled_from(PATHS), content=st.binary(max_size=200))
def test_random_bytes_get_4xx(
    app: RestApp, loop: asyncio.AbstractEventLoop, path: str, content: bytes
) -> None:
    """Arbitrary bytes are answered below 500."""
    response = post(app, loop, path, content, {})
    assert response.status_code < 500, (path, content, response.text)


def test_still_serving_after_fuzzing(app: RestApp, loop: asyncio.AbstractEventLoop) -> None:
    """After the fuzzing the app answers a good request."""
    response = post(
        app, loop, "/v1/models/toy:predict", b'{"signature_name":"inline","inputs":[1]}', {}
    )
    assert response.json() == {"outputs": [2.0]}
