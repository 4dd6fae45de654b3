"""Traffic rules: weighted versions (sticky per request id) and shadow versions that never touch
the client's answer, with their fallback in status, their metrics and their hot reload; over the
plane, REST (tritonclient.http) and gRPC (tritonclient.grpc)."""

from __future__ import annotations

import asyncio
import math
from collections import Counter
from collections.abc import Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np
import pytest
import tritonclient.grpc as triton_grpc
import tritonclient.http as triton_http

from servinglib.core.servable_state import ManagerState
from servinglib.errors import InvalidArgumentError, StatusCode
from servinglib.request_extras import RequestExtras, request_extras_scope
from servinglib.server.config import (
    ModelConfig,
    ModelServerConfig,
    parse_model_server_config,
    read_model_server_config,
)
from servinglib.server.config_file_watcher import ModelConfigFileWatcher
from servinglib.server.model_spec import ModelSpec
from servinglib.server.observe.metrics import ServerMetrics
from servinglib.server.plane.data_plane import DataPlane
from servinglib.server.plane.shadowing import DEFAULT_MAX_QUEUED, agree
from servinglib.server.rest import RestOptions, RestServer, create_app
from servinglib.server.server_core import ServerCore
from servinglib.server.traffic_rule import ShadowRule, TrafficRule
from servinglib.sources.version_policy import ServableVersionPolicy
from servinglib.testing import wait_until, write_python_model
from servinglib.testing.plugin import TEST_SERVER_CORE_OPTIONS
from tests.server.grpc.grpc_servers import serving
from tests.server.plane import shadow_gate

MODEL_PY = """
import numpy as np
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    @signature(name="serving_default", inputs=[TensorSpec("x", "float32", [-1])],
               outputs=[TensorSpec("y", "float32", [-1])])
    def predict(self, x):
        BODY
        return {"y": x + OFFSET}
"""

SOURCES = {
    1: ("pass", "1"),
    2: ("pass", "1"),  # identical to version 1
    3: ("pass", "1.25"),  # disagrees with version 1 beyond 0.25
    4: (
        "from tests.server.plane.shadow_gate import ENTERED, RELEASE\n"
        "        ENTERED.set()\n        RELEASE.wait(30)",
        "1",
    ),  # blocks until the test releases it
    5: ("raise RuntimeError('the candidate is broken')", "1"),
    6: ("pass", "1"),  # the latest: what the version policy serves
}

X = {"x": np.array([1.0, 2.0], np.float32)}
LATEST = ModelSpec.latest("m")


def model_config(root: Path, traffic: TrafficRule | None) -> ModelConfig:
    return ModelConfig(
        "m",
        root / "m",
        "python",
        ServableVersionPolicy.specific(SOURCES),
        traffic=traffic,
    )


@pytest.fixture
def root(tmp_path: Path) -> Path:
    for version, (body, offset) in SOURCES.items():
        source = MODEL_PY.replace("BODY", body).replace("OFFSET", offset)
        write_python_model(tmp_path, "m", source, version=version)
    return tmp_path


@pytest.fixture
def core(root: Path) -> Iterator[ServerCore]:
    with ServerCore(
        ModelServerConfig([model_config(root, None)]), TEST_SERVER_CORE_OPTIONS
    ) as core:
        wait_until(lambda: serving_versions(core) == set(SOURCES))
        yield core


@pytest.fixture
def plane(core: ServerCore) -> Iterator[DataPlane]:
    plane = DataPlane(core, max_workers=2)
    yield plane
    shadow_gate.RELEASE.set()  # a test that failed midway must not leave the shadow blocked
    plane.close()
    shadow_gate.ENTERED.clear()
    shadow_gate.RELEASE.clear()


def serving_versions(core: ServerCore) -> set[int]:
    """The versions requests reach now (the monitor may publish AVAILABLE a moment earlier)."""
    return {servable.version for servable in core.manager.list_available_servable_ids()}


def set_rule(core: ServerCore, root: Path, traffic: TrafficRule | None) -> None:
    core.reload_config(ModelServerConfig([model_config(root, traffic)]))


def version_for(plane: DataPlane, request_id: str) -> int:
    with request_extras_scope(RequestExtras.of_request(request_id, {})):
        return plane.infer_blocking(LATEST, None, X).version


def outcomes(plane: DataPlane) -> dict[str, int]:
    return {outcome: n for (_, outcome), n in plane.shadow_usage().outcomes.items()}


# -- weights ---------------------------------------------------------------------------------


def test_weights_split_2000_requests_90_10_within_a_binomial_bound(
    core: ServerCore, plane: DataPlane, root: Path
) -> None:
    """Requests naming no version split 90/10 over 2,000 sticky ids: version 2 within 4 sd of
    200 (the ids fix every draw, so the test cannot flake)."""
    set_rule(core, root, TrafficRule.split({1: 90, 2: 10}, sticky=True))
    counts = Counter(version_for(plane, f"req-{i}") for i in range(2000))
    assert set(counts) == {1, 2}
    bound = 4 * math.sqrt(2000 * 0.1 * 0.9)
    assert abs(counts[2] - 200) <= bound, counts


def test_a_request_naming_a_version_or_label_ignores_the_weights(
    core: ServerCore, plane: DataPlane, root: Path
) -> None:
    """The rule applies only to requests that name neither a version nor a label."""
    set_rule(core, root, TrafficRule.split({1: 100}))
    assert plane.infer_blocking(LATEST, None, X).version == 1
    assert plane.infer_blocking(ModelSpec.specific("m", 2), None, X).version == 2


def test_sticky_ids_agree_over_the_plane_rest_and_grpc(
    core: ServerCore, plane: DataPlane, root: Path
) -> None:
    """One request id lands on one version every time, whichever protocol carries it (the V2
    ``id`` over tritonclient.http and tritonclient.grpc, the x-request-id header over TF
    Serving's REST API)."""
    rule = TrafficRule.split({1: 50, 2: 50}, sticky=True)
    set_rule(core, root, rule)
    ids = [f"client-{i}" for i in range(40)]
    expected = {i: rule.choose(i) for i in ids}
    assert set(expected.values()) == {1, 2}
    assert {i: version_for(plane, i) for i in ids} == expected
    with rest_server(plane) as url:
        client = triton_http.InferenceServerClient(url.removeprefix("http://"))
        try:
            over_rest = {i: rest_version(client, i) for i in ids}
        finally:
            client.close()
        tf_serving = {i: tf_rest_version(url, i) for i in ids[:10]}
    with serving(plane) as served:
        grpc_client = triton_grpc.InferenceServerClient(served.address)
        try:
            over_grpc = {i: grpc_version(grpc_client, i) for i in ids}
        finally:
            grpc_client.close()
    assert over_rest == over_grpc == expected
    assert tf_serving == {i: expected[i] for i in ids[:10]}


# -- fallback, status, reload ----------------------------------------------------------------


def test_a_rule_naming_a_missing_version_falls_back_and_status_says_so(
    core: ServerCore, plane: DataPlane, root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Weights on version 7, which the model does not have: its share is answered by the
    policy's version (the latest), the status lists version 7 with FAILED_PRECONDITION saying
    where its share goes (over the plane and REST), and the log says it once."""
    set_rule(core, root, TrafficRule.split({1: 50, 7: 50}, sticky=True))
    versions = {version_for(plane, f"r{i}") for i in range(40)}
    assert versions == {1, 6}
    status = plane.questions.model_status("m")
    (seven,) = [v for v in status.versions if v.version == 7]
    assert seven.state is ManagerState.END
    assert seven.error is not None
    assert seven.error.code is StatusCode.FAILED_PRECONDITION
    assert "traffic rule names version 7" in seven.error.message
    assert [v.version for v in status.versions] == sorted(SOURCES | {7: ""}, reverse=True)
    one = plane.questions.model_status("m", 1)
    assert [v.version for v in one.versions] == [1]  # a version's own status is its own
    with rest_server(plane) as url:
        reply = httpx.get(f"{url}/v1/models/m").json()
    (entry,) = [v for v in reply["model_version_status"] if v["version"] == "7"]
    assert entry["status"]["error_code"] == "FAILED_PRECONDITION"
    assert "its share goes to the version the policy serves" in entry["status"]["error_message"]
    fell_back = [r for r in caplog.records if "names version 7" in r.getMessage()]
    assert len(fell_back) == 1  # said once, not per request


def test_editing_the_rule_in_models_config_applies_to_the_next_request(
    core: ServerCore, plane: DataPlane, root: Path
) -> None:
    """The rule lives in models.config: a watched file's edit moves the traffic at once, no
    version reloads."""
    path = root / "models.config"
    path.write_text(config_text(root, "weights { key: 1 value: 1 }"))
    core.reload_config(read_model_server_config(path))
    with ModelConfigFileWatcher(core, str(path), 60, watch_filesystem_events=False) as watcher:
        assert {version_for(plane, f"r{i}") for i in range(20)} == {1}
        path.write_text(config_text(root, "weights { key: 2 value: 1 }"))
        assert watcher.check_once()
        assert watcher.status().error is None
        assert {version_for(plane, f"r{i}") for i in range(20)} == {2}
    states = core.monitor.get_version_states("m")
    assert all(s.state.manager_state is ManagerState.AVAILABLE for s in states.values())


def test_the_rule_round_trips_through_the_config_text_and_rejects_bad_values(
    root: Path,
) -> None:
    """A traffic block parses to a TrafficRule and prints back; bad weights and fractions are
    InvalidArgumentError naming the field."""
    config = parse_model_server_config(
        config_text(
            root,
            "weights { key: 1 value: 90 } weights { key: 2 value: 10 } sticky: true "
            "shadow { version: 3 fraction: 0.5 tolerance: 0.01 log_disagreements: true }",
        )
    )
    rule = config.models[0].traffic
    assert rule == TrafficRule(
        weights={1: 90, 2: 10},
        sticky=True,
        shadow=ShadowRule(version=3, fraction=0.5, tolerance=0.01, log_disagreements=True),
    )
    assert parse_model_server_config(config.to_text()) == config
    for bad, field in [
        ("weights { key: 1 value: 0 }", "at least one weight"),
        ("shadow { version: 3 fraction: 1.5 }", "fraction"),
        ("shadow { version: 3 tolerance: -1 }", "tolerance"),
        ("weights { key: -1 value: 1 }", "version"),
    ]:
        with pytest.raises(InvalidArgumentError, match=field):
            parse_model_server_config(config_text(root, bad))


# -- shadow ----------------------------------------------------------------------------------


def test_a_blocked_shadow_never_delays_the_client_over_the_plane_rest_and_grpc(
    core: ServerCore, plane: DataPlane, root: Path
) -> None:
    """With the shadow version blocked on an event, every client gets version 1's answer: the
    copies wait, counted once the shadow is released."""
    set_rule(core, root, TrafficRule(weights={1: 1}, shadow=ShadowRule(version=4)))
    first = plane.infer_blocking(LATEST, None, X)
    assert shadow_gate.ENTERED.wait(30)  # the shadow thread now holds the first copy
    answers = [first.outputs["y"].tolist()]
    with rest_server(plane) as url:
        client = triton_http.InferenceServerClient(url.removeprefix("http://"))
        try:
            answers.append(rest_y(client))
        finally:
            client.close()
    with serving(plane) as served:
        grpc_client = triton_grpc.InferenceServerClient(served.address)
        try:
            answers.append(grpc_y(grpc_client))
        finally:
            grpc_client.close()
    answers.append(asyncio.run(plane.infer(LATEST, None, X)).outputs["y"].tolist())
    assert answers == [[2.0, 3.0]] * 4
    assert outcomes(plane) == {}  # not one copy finished: no client waited for one
    shadow_gate.RELEASE.set()
    wait_until(lambda: outcomes(plane).get("agreed") == 4)


def test_a_full_shadow_queue_drops_copies_and_counts_them(
    core: ServerCore, plane: DataPlane, root: Path
) -> None:
    """A blocked shadow holds one copy; the queue takes its bound more; the rest are dropped."""
    set_rule(core, root, TrafficRule(weights={1: 1}, shadow=ShadowRule(version=4)))
    plane.infer_blocking(LATEST, None, X)
    assert shadow_gate.ENTERED.wait(30)
    for _ in range(DEFAULT_MAX_QUEUED + 5):
        assert plane.infer_blocking(LATEST, None, X).version == 1
    assert outcomes(plane) == {"dropped": 5}
    shadow_gate.RELEASE.set()
    wait_until(lambda: outcomes(plane).get("agreed") == DEFAULT_MAX_QUEUED + 1)


def test_a_copy_runs_only_while_its_model_is_idle_and_is_dropped_past_the_wait(
    core: ServerCore, root: Path
) -> None:
    """While a call of the model is in flight (version 4, blocked), the copy of another call
    waits and is dropped past its wait; the blocked call's own copy runs once the model is idle."""
    set_rule(core, root, TrafficRule(weights={1: 1}, shadow=ShadowRule(version=2)))
    plane = DataPlane(core, max_workers=2, max_calls_per_model=2)  # two calls of m at once
    try:
        with ThreadPoolExecutor(1) as pool:
            blocked = pool.submit(plane.infer_blocking, ModelSpec.specific("m", 4), None, X)
            assert shadow_gate.ENTERED.wait(30)  # version 4's call is in flight until released
            assert plane.infer_blocking(LATEST, None, X).version == 1
            wait_until(lambda: outcomes(plane) != {})
            assert outcomes(plane) == {"dropped": 1}  # never run beside the call in flight
            shadow_gate.RELEASE.set()
            assert blocked.result(30).version == 4
        wait_until(lambda: outcomes(plane) == {"dropped": 1, "agreed": 1})
    finally:
        shadow_gate.RELEASE.set()
        plane.close()
        shadow_gate.ENTERED.clear()
        shadow_gate.RELEASE.clear()


def test_a_raising_shadow_never_changes_the_answer_and_is_counted_failed(
    core: ServerCore, plane: DataPlane, root: Path
) -> None:
    """Version 5 raises on every copy: the clients still get version 1's answers."""
    set_rule(core, root, TrafficRule(weights={1: 1}, shadow=ShadowRule(version=5)))
    for _ in range(3):
        result = plane.infer_blocking(LATEST, None, X)
        assert (result.version, result.outputs["y"].tolist()) == (1, [2.0, 3.0])
    wait_until(lambda: outcomes(plane).get("failed") == 3)


def test_disagreements_are_counted_in_metrics_and_a_tolerance_accepts_them(
    core: ServerCore, plane: DataPlane, root: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Version 3 answers 0.25 more than version 1: disagreed (and logged with the request id)
    exactly, agreed within 0.5; the scrape shows calls by outcome and the latency histogram."""
    rule = TrafficRule(weights={1: 1}, shadow=ShadowRule(version=3, log_disagreements=True))
    set_rule(core, root, rule)
    version_for(plane, "disagreeing-request")
    wait_until(lambda: outcomes(plane).get("disagreed") == 1)
    set_rule(core, root, TrafficRule(weights={1: 1}, shadow=ShadowRule(version=3, tolerance=0.5)))
    plane.infer_blocking(LATEST, None, X)
    wait_until(lambda: outcomes(plane).get("agreed") == 1)
    metrics = ServerMetrics()
    metrics.attach(core)
    metrics.attach_plane(plane)
    text = metrics.render().decode()
    assert 'servinglib_shadow_calls_total{model_name="m",outcome="disagreed"} 1.0' in text
    assert 'servinglib_shadow_calls_total{model_name="m",outcome="agreed"} 1.0' in text
    assert 'servinglib_shadow_latency_seconds_count{model_name="m"} 2.0' in text
    logged = [r.getMessage() for r in caplog.records if r.name == "servinglib.server.shadow"]
    assert any("disagreeing-request" in m and "version 3" in m for m in logged), logged


def test_a_fraction_copies_about_that_share_and_never_the_shadows_own_calls(
    core: ServerCore, plane: DataPlane, root: Path
) -> None:
    """A shadow at fraction 0.5 copies some but not all calls; calls of the shadow version
    itself are never copied."""
    set_rule(core, root, TrafficRule(shadow=ShadowRule(version=2, fraction=0.5)))
    for _ in range(200):
        plane.infer_blocking(ModelSpec.specific("m", 1), None, X)
    for _ in range(10):
        plane.infer_blocking(ModelSpec.specific("m", 2), None, X)
    wait_until(plane._shadowing.idle)  # every copy taken has run (or was dropped)
    copied = sum(plane.shadow_usage().outcomes.values())
    assert 40 < copied < 160, copied  # binomial(200, 0.5): 8.5 sd either side


@pytest.mark.parametrize(
    ("primary", "shadow", "tolerance", "agrees"),
    [
        ({"y": np.array([1.0])}, {"y": np.array([1.0])}, 0.0, True),
        ({"y": np.array([1.0])}, {"y": np.array([1.1])}, 0.0, False),
        ({"y": np.array([1.0])}, {"y": np.array([1.1])}, 0.2, True),
        ({"y": np.array([np.nan])}, {"y": np.array([np.nan])}, 0.0, True),
        ({"y": np.array([1.0])}, {"y": np.array([1.0, 1.0])}, 1.0, False),
        ({"y": np.array([1.0])}, {"z": np.array([1.0])}, 1.0, False),
        ({"s": np.array([b"a"], object)}, {"s": np.array([b"a"], object)}, 0.0, True),
        ({"s": np.array([b"a"], object)}, {"s": np.array([b"b"], object)}, 1.0, False),
        ({"b": np.array([True])}, {"b": np.array([False])}, 1.0, False),
    ],
    ids=["equal", "differ", "within", "nan", "shape", "missing", "bytes", "bytes-differ", "bool"],
)
def test_agree_compares_shapes_values_and_tolerance(
    primary: Mapping[str, np.ndarray],
    shadow: Mapping[str, np.ndarray],
    tolerance: float,
    agrees: bool,
) -> None:
    """Outputs agree with the same names and shapes and every number within the tolerance;
    bytes and bools only when equal."""
    assert agree(primary, shadow, tolerance) is agrees


# -- helpers ---------------------------------------------------------------------------------


def config_text(root: Path, traffic: str) -> str:
    return (
        f'model_config_list {{ config {{ name: "m" base_path: "{root / "m"}" '
        'model_platform: "python" model_version_policy { specific { '
        + " ".join(f"versions: {v}" for v in SOURCES)
        + f" }} }} traffic {{ {traffic} }} }} }}"
    )


class rest_server:  # noqa: N801 - used as a context manager, like a function
    def __init__(self, plane: DataPlane) -> None:
        self._server = RestServer(create_app(plane, RestOptions()), "127.0.0.1", 0)

    def __enter__(self) -> str:
        self._server.start()
        return self._server.url

    def __exit__(self, *_exc: object) -> None:
        self._server.stop()


def v2_inputs(module: object) -> list[object]:
    infer_input = module.InferInput("x", [2], "FP32")  # type: ignore[attr-defined]
    infer_input.set_data_from_numpy(X["x"])
    return [infer_input]


def rest_version(client: triton_http.InferenceServerClient, request_id: str) -> int:
    reply = client.infer("m", v2_inputs(triton_http), request_id=request_id)
    return int(reply.get_response()["model_version"])


def rest_y(client: triton_http.InferenceServerClient) -> list[float]:
    return client.infer("m", v2_inputs(triton_http)).as_numpy("y").tolist()


def grpc_version(client: triton_grpc.InferenceServerClient, request_id: str) -> int:
    reply = client.infer("m", v2_inputs(triton_grpc), request_id=request_id)
    return int(reply.get_response().model_version)


def grpc_y(client: triton_grpc.InferenceServerClient) -> list[float]:
    return client.infer("m", v2_inputs(triton_grpc)).as_numpy("y").tolist()


def tf_rest_version(url: str, request_id: str) -> int:
    """The version of a TF Serving REST predict carrying ``x-request-id``, read from the
    statistics it leaves (the TF Serving answer names no version): the one counted."""
    before = _successes(url)
    reply = httpx.post(
        f"{url}/v1/models/m:predict",
        json={"instances": [1.0, 2.0]},
        headers={"x-request-id": request_id},
    )
    assert reply.status_code == 200, reply.text
    after = _successes(url)
    (version,) = [v for v in after if after[v] != before.get(v, 0)]
    return version


def _successes(url: str) -> dict[int, int]:
    stats = httpx.get(f"{url}/v2/models/m/stats").json()["model_stats"]
    return {int(s["version"]): s["inference_stats"]["success"]["count"] for s in stats}
