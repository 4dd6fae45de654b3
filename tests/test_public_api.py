"""Tests for the pinned public API: sorted re-exports, final concrete classes, py.typed."""

from __future__ import annotations

import enum
import importlib
import importlib.resources
import inspect
import types
import typing

import pytest

PUBLIC_MODULES = [
    "servinglib",
    "servinglib.batching",
    "servinglib.codecs",
    "servinglib.core",
    "servinglib.loaders",
    "servinglib.loaders.tensorflow",
    "servinglib.server",
    "servinglib.server.grpc",
    "servinglib.server.rest",
    "servinglib.sources",
    "servinglib.testing",
]


def public_module(name: str) -> types.ModuleType:
    return importlib.import_module(name)


def exported(name: str) -> list[tuple[str, object]]:
    """(name, object) of every name in the module's ``__all__``."""
    module = public_module(name)
    return [(item, getattr(module, item)) for item in module.__all__]


def exported_classes() -> list[tuple[str, type]]:
    """Every class exported by a public module, once each, as (qualified export name, class)."""
    seen: set[type] = set()
    classes: list[tuple[str, type]] = []
    for module in PUBLIC_MODULES:
        for item, obj in exported(module):
            # StoragePath is an alias of str: builtins are not ours to mark final.
            if inspect.isclass(obj) and obj.__module__ != "builtins" and obj not in seen:
                seen.add(obj)
                classes.append((f"{module}.{item}", obj))
    return classes


def is_extension_point(cls: type) -> bool:
    """ABCs with abstract methods, base classes meant for subclassing, enums and exceptions."""
    from servinglib.loaders import PythonModel
    from servinglib.sources import Source

    return (
        inspect.isabstract(cls)
        or cls in (PythonModel, Source)  # documented base classes with no abstract method
        or getattr(cls, "_is_protocol", False)  # structural types (Target)
        or issubclass(cls, (enum.Enum, BaseException))
    )


CONCRETE = [
    pytest.param(cls, id=name) for name, cls in exported_classes() if not is_extension_point(cls)
]
ABSTRACT = [
    pytest.param(cls, id=name) for name, cls in exported_classes() if inspect.isabstract(cls)
]


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_all_is_sorted_and_unique(name: str) -> None:
    """A public module's __all__ is sorted and names nothing twice."""
    names = list(public_module(name).__all__)

    assert names == sorted(names)
    assert len(names) == len(set(names))


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_every_exported_name_resolves(name: str) -> None:
    """Every name in a public module's __all__ is an attribute of the module."""
    module = public_module(name)

    missing = [item for item in module.__all__ if not hasattr(module, item)]

    assert missing == []


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_exports_are_defined_in_servinglib(name: str) -> None:
    """Every exported class and function is servinglib's own, not a re-export of a dependency."""
    foreign = {
        item: getattr(obj, "__module__", None)
        for item, obj in exported(name)
        if not str(getattr(obj, "__module__", "")).startswith("servinglib.")
        and typing.get_origin(obj) is None  # type aliases (e.g. a Callable) are not classes
        and not isinstance(obj, str)  # constants (e.g. the entry-point group name)
        and obj is not str  # StoragePath, an alias of str
    }

    assert foreign == {}


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_no_public_name_outside_all(name: str) -> None:
    """Every public non-module attribute of a public module is listed in its __all__."""
    module = public_module(name)

    unlisted = {
        item
        for item, obj in vars(module).items()
        if not item.startswith("_") and not inspect.ismodule(obj)
    } - set(module.__all__)

    assert unlisted == set()


def test_top_level_reexports_the_subpackages_objects() -> None:
    """servinglib's names are the very objects its subpackages define."""
    import servinglib

    sources = [
        public_module(name)
        for name in (
            "servinglib.core",
            "servinglib.errors",
            "servinglib.loaders",
            "servinglib.servable",
            "servinglib.server",
            "servinglib.sources",
        )
    ]
    for item in servinglib.__all__:
        assert any(getattr(m, item, None) is getattr(servinglib, item) for m in sources), item


def test_there_are_concrete_and_abstract_classes_to_check() -> None:
    """The final-class checks below see the concrete and abstract classes they are meant for."""
    concrete = {param.values[0] for param in CONCRETE}
    abstract = {param.values[0] for param in ABSTRACT}
    core = public_module("servinglib.core")
    testing = public_module("servinglib.testing")

    assert {core.BasicManager, core.SimpleLoader, testing.FakeLoader} <= concrete
    assert {core.Loader, core.Clock, core.Manager} <= abstract


@pytest.mark.parametrize("cls", CONCRETE)
def test_concrete_public_classes_are_final(cls: type) -> None:
    """Every exported class that is not an ABC, enum or exception is @typing.final."""
    assert getattr(cls, "__final__", False) is True


@pytest.mark.parametrize("cls", ABSTRACT)
def test_abstract_public_classes_are_not_final(cls: type) -> None:
    """ABCs are the extension points: none is marked final."""
    assert not getattr(cls, "__final__", False)


def test_exceptions_are_not_final() -> None:
    """The exported exception base stays subclassable: exceptions are extension points."""
    import servinglib

    assert not getattr(servinglib.ServingError, "__final__", False)


def test_package_ships_py_typed() -> None:
    """servinglib ships the py.typed marker, so type checkers use its annotations."""
    assert (importlib.resources.files("servinglib") / "py.typed").is_file()


def test_version_is_the_installed_distributions() -> None:
    """servinglib.__version__ is the version the installed distribution's metadata records."""
    import importlib.metadata

    import servinglib

    assert servinglib.__version__ == importlib.metadata.version("servinglib")
