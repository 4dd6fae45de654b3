"""Tests for the opt-in pytest plugin servinglib.testing.plugin, run in pytester sessions."""

from __future__ import annotations

import importlib.metadata
import textwrap

import pytest

# The inner sessions run in subprocesses, as users run pytest: in-process sessions would see
# servinglib.testing.plugin already imported by other test modules of this run (which defeats
# its assert rewriting, a warning, hence an error) and cannot reload numpy's C extension.

pytest_plugins = ["pytester"]

# The inner sessions fail on any warning, as ours do.
INI = "[pytest]\nfilterwarnings = error\n"

MODEL_PY = """
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    @signature(
        name="serving_default",
        inputs=[TensorSpec("x", "float32", [-1])],
        outputs=[TensorSpec("y", "float32", [-1])],
    )
    def double(self, x):
        return {"y": x * 2}
"""

FIXTURE_TESTS = f"""
import numpy as np

from servinglib.server import ModelConfig, ModelServerConfig, ModelSpec
from servinglib.servable import call_signature
from servinglib.testing import FakeClock, wait_until_available

MODEL_PY = {MODEL_PY!r}
CORES = []


def test_fake_clock(fake_clock):
    assert isinstance(fake_clock, FakeClock)
    fake_clock.advance(5.0)
    assert fake_clock.now() == 5.0


def test_model_dirs(model_dirs, tmp_path):
    base = model_dirs("m", [1, 2], {{"model.py": MODEL_PY}})
    assert base == tmp_path / "models" / "m"
    assert sorted(p.name for p in base.iterdir()) == ["1", "2"]


def test_server_core_from_a_dict(server_core, model_dirs):
    base = model_dirs("m", [1, 3], {{"model.py": MODEL_PY}})
    core = server_core({{"m": base}}, platform="python")
    CORES.append(core)
    assert wait_until_available(core, "m").version == 3
    with core.servable_handle(ModelSpec.latest("m")) as handle:
        y = call_signature(handle.servable, None, {{"x": np.array([2.0], np.float32)}})["y"]
    assert y.tolist() == [4.0]
    assert core.options.manager.load_retry.max_num_load_retries == 0


def test_server_core_from_a_config_with_overrides(server_core, model_dirs):
    base = model_dirs("n", [1], {{"model.py": MODEL_PY}})
    core = server_core(ModelServerConfig([ModelConfig.python("n", base)]), start_degraded=True)
    CORES.append(core)
    assert core.ready()
    assert core.options.start_degraded


def test_the_cores_were_closed_at_teardown():
    assert len(CORES) == 2
    assert not any(core.ready() for core in CORES)
"""


CLIENT_TESTS = f"""
import numpy as np
import tritonclient.grpc as grpcclient
from tensorflow_serving.apis import get_model_status_pb2, model_service_pb2_grpc

MODEL_PY = {MODEL_PY!r}


def test_rest_and_grpc_clients(server_core, model_dirs, rest_client, grpc_channel):
    core = server_core({{"m": model_dirs("m", [1], {{"model.py": MODEL_PY}})}}, platform="python")
    client = rest_client(core)
    response = client.post("/v1/models/m:predict", json={{"instances": [1.0, 2.5]}})
    assert response.json() == {{"predictions": [2.0, 5.0]}}

    channel = grpc_channel(core)
    stub = model_service_pb2_grpc.ModelServiceStub(channel)
    request = get_model_status_pb2.GetModelStatusRequest()
    request.model_spec.name = "m"
    status = stub.GetModelStatus(request, timeout=10)
    assert status.model_version_status[0].version == 1

    triton = grpcclient.InferenceServerClient(channel.target)
    x = grpcclient.InferInput("x", [2], "FP32")
    x.set_data_from_numpy(np.array([1.0, 3.0], np.float32))
    assert triton.infer("m", [x]).as_numpy("y").tolist() == [2.0, 6.0]
    triton.close()
"""


def test_rest_client_and_grpc_channel_reach_real_servers(pytester: pytest.Pytester) -> None:
    """rest_client and grpc_channel give clients of real servers over the test's ServerCore."""
    pytester.makeini(INI)
    pytester.makepyfile(test_clients=CLIENT_TESTS)

    result = pytester.runpytest_subprocess("-p", "servinglib.testing.plugin")

    result.assert_outcomes(passed=1)


def test_fixtures_work_once_enabled_with_dash_p(pytester: pytest.Pytester) -> None:
    """-p servinglib.testing.plugin gives fake_clock, model_dirs and server_core; cores close."""
    pytester.makeini(INI)
    pytester.makepyfile(test_fixtures=FIXTURE_TESTS)

    result = pytester.runpytest_subprocess("-p", "servinglib.testing.plugin")

    result.assert_outcomes(passed=5)


def test_fixtures_work_once_enabled_in_a_conftest(pytester: pytest.Pytester) -> None:
    """pytest_plugins in the top-level conftest.py enables the plugin too."""
    pytester.makeini(INI)
    pytester.makeconftest('pytest_plugins = ["servinglib.testing.plugin"]')
    pytester.makepyfile(test_fixtures=FIXTURE_TESTS)

    result = pytester.runpytest_subprocess()

    result.assert_outcomes(passed=5)


def test_the_plugin_is_not_loaded_unless_asked(pytester: pytest.Pytester) -> None:
    """Without opting in, the fixtures do not exist: installing servinglib changes no project."""
    pytester.makeini(INI)
    pytester.makepyfile(
        test_plain=textwrap.dedent(
            """
            def test_uses_a_fixture(fake_clock):
                pass
            """
        )
    )

    result = pytester.runpytest_subprocess()

    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*fixture 'fake_clock' not found*"])


def test_a_failing_start_fails_the_test_and_closes_nothing_twice(
    pytester: pytest.Pytester,
) -> None:
    """A model that cannot load makes server_core raise in the test, with the model named."""
    pytester.makeini(INI)
    pytester.makepyfile(
        test_broken=textwrap.dedent(
            """
            import pytest
            from servinglib.errors import UnknownError

            def test_broken_model(server_core, model_dirs):
                base = model_dirs("bad", [1], {"model.py": "raise ValueError('broken')"})
                with pytest.raises(UnknownError, match="bad"):
                    server_core({"bad": base}, platform="python")
            """
        )
    )

    result = pytester.runpytest_subprocess("-p", "servinglib.testing.plugin")

    result.assert_outcomes(passed=1)


def test_no_pytest11_entry_point_registers_the_plugin() -> None:
    """servinglib declares no pytest11 entry point, so pytest never auto-loads the plugin."""
    entry_points = importlib.metadata.entry_points(group="pytest11")

    assert [ep for ep in entry_points if ep.value.startswith("servinglib")] == []
