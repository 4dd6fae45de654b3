"""Wrong argument types are a TypeError at the public call, naming what was expected."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from servinglib.core.aspired_versions_manager import AspiredVersionsManager
from servinglib.core.availability_preserving_policy import AvailabilityPreservingPolicy
from servinglib.core.basic_manager import BasicManager
from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId
from servinglib.core.servable_request import ServableRequest
from servinglib.servable import SignatureSpec, TensorSpec, call_signature
from servinglib.server.model_spec import ModelSpec
from servinglib.testing import FakeLoader, static_manager


@pytest.fixture
def aspired() -> Iterator[AspiredVersionsManager]:
    """A manager stepped by hand."""
    with AspiredVersionsManager(AvailabilityPreservingPolicy(), manage_state_interval_s=None) as m:
        yield m


def test_a_model_spec_given_to_a_manager_is_a_type_error() -> None:
    """Managers take ServableRequests; a ModelSpec is refused naming both types."""
    with static_manager({"m": {1: object()}}) as manager:
        with pytest.raises(TypeError, match=r"must be a ServableRequest .*not ModelSpec"):
            manager.servable_handle(ModelSpec.latest("m"))  # type: ignore[arg-type]
        with manager.servable_handle(ServableRequest.latest("m")) as handle:
            assert handle.id == ServableId("m", 1)


def test_a_bare_loader_given_to_set_aspired_versions_is_a_type_error(
    aspired: AspiredVersionsManager,
) -> None:
    """set_aspired_versions takes ServableData items; a bare loader is refused naming it."""
    with pytest.raises(TypeError, match=r"must be a ServableData .*not FakeLoader"):
        aspired.set_aspired_versions("m", [FakeLoader()])  # type: ignore[list-item]
    with pytest.raises(TypeError, match=r"must be a Loader, not str"):
        aspired.set_aspired_versions("m", [ServableData.of(ServableId("m", 1), "path")])  # type: ignore[list-item]


def test_basic_manager_entry_points_check_their_argument_types() -> None:
    """manage_servable wants ServableData; load/unload/stop/cancel want a ServableId."""
    manager = BasicManager()
    try:
        with pytest.raises(TypeError, match="must be a ServableData"):
            manager.manage_servable(FakeLoader())  # type: ignore[arg-type]
        for call in (
            manager.load_servable,
            manager.unload_servable,
            manager.stop_managing_servable,
            manager.cancel_load_servable_retry,
        ):
            with pytest.raises(TypeError, match=r"must be a ServableId\(name, version\), not str"):
                call("m")  # type: ignore[arg-type]
    finally:
        manager.close()


class _Identity:
    """Not a Servable: what a caller might pass by mistake."""


def test_call_signature_checks_servable_inputs_and_tensors() -> None:
    """A handle for its servable, a list for an array, or an array for the inputs are TypeErrors."""
    from servinglib.servable import Servable

    class Echo(Servable):
        @property
        def signatures(self) -> dict[str, SignatureSpec]:
            spec = [TensorSpec("x", "float32", [-1])]
            return {"serving_default": SignatureSpec(spec, [TensorSpec("x", "float32", [-1])])}

        def call(self, signature_name, inputs, output_filter=None):  # type: ignore[no-untyped-def]
            return dict(inputs)

    x = np.array([1.0], np.float32)
    with pytest.raises(TypeError, match=r"Input tensor 'x' must be a numpy.ndarray .*not list"):
        call_signature(Echo(), None, {"x": [1.0]})  # type: ignore[dict-item]
    with pytest.raises(TypeError, match=r"inputs must be a mapping .*not ndarray"):
        call_signature(Echo(), None, x)  # type: ignore[arg-type]
    with (
        static_manager({"m": {1: Echo()}}) as manager,
        manager.servable_handle(ServableRequest.latest("m")) as handle,
    ):
        with pytest.raises(TypeError, match=r"handle.servable, not the handle.*ServableHandle"):
            call_signature(handle, None, {"x": x})  # type: ignore[arg-type]
        assert call_signature(handle.servable, None, {"x": x})["x"] is x
    with pytest.raises(TypeError, match="must be a Servable"):
        call_signature(_Identity(), None, {"x": x})  # type: ignore[arg-type]


def test_source_adapters_and_routers_want_servable_data() -> None:
    """A source adapter or router given a bare path instead of ServableData says so."""
    from servinglib.sources.source_router import DynamicSourceRouter
    from servinglib.testing import FakeStoragePathSourceAdapter

    for target in (FakeStoragePathSourceAdapter(), DynamicSourceRouter(1)):
        with pytest.raises(
            TypeError, match=r"set_aspired_versions\(\) must be a ServableData .*str"
        ):
            target.set_aspired_versions("m", ["/models/m/1"])  # type: ignore[list-item]
