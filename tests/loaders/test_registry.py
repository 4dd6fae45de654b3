"""The platform registry: built-in, registered and entry-point platforms, and bad ones."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from servinglib.core.loader import Loader
from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId
from servinglib.errors import AlreadyExistsError, InvalidArgumentError, ServingError, StatusCode
from servinglib.loaders.registry import Platform, PlatformRegistry
from servinglib.sources.source import StoragePath
from servinglib.sources.source_adapter import SourceAdapter, UnarySourceAdapter
from servinglib.sources.target import connect
from servinglib.testing import FakeLoader, RecordingTarget

V1 = ServableId("m", 1)


class FakeAdapter(UnarySourceAdapter[StoragePath, Loader]):
    """Makes a FakeLoader serving the path (and the config it was made with)."""

    def __init__(self, config: Any) -> None:
        super().__init__()
        self.config = config

    def convert(self, servable_name: str, data: StoragePath) -> Loader:
        return FakeLoader((data, self.config))


def adapt(adapter: SourceAdapter[StoragePath, Loader]) -> ServableData[Loader]:
    """Runs one version through ``adapter`` and returns what comes out."""
    target: RecordingTarget[Loader] = RecordingTarget()
    connect(adapter, target)
    adapter.set_aspired_versions("m", [ServableData.of(V1, "/models/m/1")])
    (item,) = target.last("m") or ()
    return item


def error_of(adapter: SourceAdapter[StoragePath, Loader]) -> ServingError:
    item = adapt(adapter)
    assert item.error is not None
    return item.error


def test_builtin_platforms_are_known() -> None:
    """tensorflow, python and ensemble (Triton's) are there from the start."""
    assert PlatformRegistry().names() == ["ensemble", "python", "tensorflow"]


def test_unknown_platform_errors_naming_the_known_ones() -> None:
    """An unknown platform turns each version into INVALID_ARGUMENT listing known platforms."""
    error = error_of(PlatformRegistry().make_adapter("onnx"))
    assert error.code is StatusCode.INVALID_ARGUMENT
    assert (
        error.message
        == "Model platform 'onnx' is not supported; known: ensemble, python, tensorflow"
    )


def test_missing_dependency_errors_with_the_install_hint() -> None:
    """A platform whose module is not installed errors with the install hint."""
    registry = PlatformRegistry(
        [Platform("fancy", FakeAdapter, ("no_such_module_xyz",), "pip install fancy")]
    )
    error = error_of(registry.make_adapter("fancy"))
    assert error.code is StatusCode.FAILED_PRECONDITION
    assert error.message == (
        "Model platform 'fancy' needs no_such_module_xyz, which is not installed: pip install fancy"
    )


def test_registered_platform_gets_its_config() -> None:
    """A registered factory receives the platform config and its loaders serve."""
    registry = PlatformRegistry([])
    registry.register(Platform("fake", FakeAdapter))
    item = adapt(registry.make_adapter("fake", {"threads": 2}))
    loader = item.data
    loader.load()
    assert loader.servable() == ("/models/m/1", {"threads": 2})


def test_registering_a_taken_name_needs_replace() -> None:
    """Registering a name twice fails unless replace=True."""
    registry = PlatformRegistry([])
    registry.register(Platform("fake", FakeAdapter))
    with pytest.raises(AlreadyExistsError):
        registry.register(Platform("fake", FakeAdapter))
    registry.register(Platform("fake", FakeAdapter), replace=True)


def test_factory_given_as_import_string_is_imported_when_used() -> None:
    """A "module:attribute" factory resolves at first use."""
    registry = PlatformRegistry([Platform("fake", f"{__name__}:FakeAdapter")])
    assert adapt(registry.make_adapter("fake")).ok


def test_a_failing_factory_becomes_an_error_adapter() -> None:
    """A factory that raises gives an adapter whose versions carry that error."""

    def broken(config: Any) -> SourceAdapter[StoragePath, Loader]:
        raise InvalidArgumentError("bad platform config: threads must be > 0")

    def crashing(config: Any) -> SourceAdapter[StoragePath, Loader]:
        raise RuntimeError("kaboom")

    registry = PlatformRegistry([Platform("broken", broken), Platform("crashing", crashing)])
    assert error_of(registry.make_adapter("broken")).message.startswith("bad platform config")
    crash = error_of(registry.make_adapter("crashing"))
    assert crash.code is StatusCode.UNKNOWN
    assert "Model platform 'crashing' failed to start: RuntimeError: kaboom" in crash.message


@pytest.fixture
def installed_plugin(tmp_path: Path) -> Iterator[None]:
    """A real installed distribution declaring a platform entry point (a dist-info on sys.path)."""
    package = tmp_path / "my_platform_pkg.py"
    package.write_text(
        "from servinglib.sources.source_adapter import ErrorInjectingSourceAdapter\n"
        "from servinglib.errors import UnimplementedError\n"
        "def make_adapter(config):\n"
        "    return ErrorInjectingSourceAdapter(UnimplementedError(f'plugin saw {config}'))\n"
    )
    dist_info = tmp_path / "my_platform_pkg-1.0.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: my-platform-pkg\nVersion: 1.0\n"
    )
    (dist_info / "entry_points.txt").write_text(
        "[servinglib.platforms]\nplugged = my_platform_pkg:make_adapter\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        yield
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("my_platform_pkg", None)


@pytest.mark.usefixtures("installed_plugin")
def test_entry_point_platforms_are_discovered() -> None:
    """A package declaring a servinglib.platforms entry point provides that platform."""
    registry = PlatformRegistry()
    assert "plugged" in registry.names()
    error = error_of(registry.make_adapter("plugged", "cfg"))
    assert error.message == "plugin saw cfg"
