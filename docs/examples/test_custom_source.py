"""Conformance tests of the Registry source and ScalerAdapter of custom_source.py.

Shown in docs/guides/testing_loaders.md.
Run: .venv/bin/python -m pytest docs/examples/test_custom_source.py -q -p no:cacheprovider
"""

from __future__ import annotations

from custom_source import Registry, Scaler, ScalerAdapter

from servinglib import ServableId
from servinglib.testing import assert_loader_conforms, assert_source_conforms


def registry_with_two_versions() -> Registry:
    """A registry whose model "m" has versions 1 and 2 published."""
    registry = Registry()
    registry.publish("m", 1, 10.0)
    registry.publish("m", 2, 20.0)
    return registry


def retire(registry: Registry, servable_id: ServableId) -> None:
    """Removes a version from the registry's world, as its owner would."""
    registry.retire(servable_id.name, servable_id.version)


def test_the_registry_emits_complete_sets() -> None:
    """Each set names one model, no version twice, and a retired version leaves the set."""
    assert_source_conforms(registry_with_two_versions, remove_version=retire)


def test_the_adapters_loaders_keep_the_loader_contract() -> None:
    """The loaders ScalerAdapter makes conform; a Scaler is called through call=."""

    def predict(scaler: Scaler) -> float:
        return scaler.predict(3.0)

    assert_loader_conforms(lambda: ScalerAdapter().convert("m", 2.0), call=predict)
