"""Who still refers to an object: readable names for check_loader's messages."""

from __future__ import annotations

import gc
import types
from typing import Any


def describe_referrers(obj: object) -> str:
    """What refers to ``obj``, for messages: "LeakyLoader._servable", "a list in the global
    cache of module m", ... (frames left out).

    Objects moved to the permanent generation (:func:`gc.freeze`, which
    get_referrers does not search) are searched too: they are thawed for
    the search and frozen again with everything alive.
    Thread safety: any thread; the answer is a snapshot.
    """
    frozen = gc.get_freeze_count() > 0
    if frozen:
        gc.unfreeze()
    try:
        # Plain loops: a comprehension naming ``obj`` would hold it in a cell of its own.
        found = set()
        for holder in gc.get_referrers(obj):
            if not isinstance(holder, types.FrameType):
                found.add(_describe_holder(holder, obj, depth=2))
    finally:
        if frozen:
            gc.freeze()
    return ", ".join(sorted(found)) if found else "objects the garbage collector does not track"


def _describe_holder(holder: object, target: object, depth: int) -> str:
    """Where ``holder`` keeps ``target``: an attribute, a module global, or "a <type>"."""
    if isinstance(holder, dict):
        key = _key_of(holder, target) or "?"
        for owner in gc.get_referrers(holder):
            if getattr(owner, "__dict__", None) is holder:
                return _attribute_text(owner, key)
        return f"a dict (key {key})"
    try:
        attribute = _key_of(vars(holder), target)
    except TypeError:  # no __dict__: a list, a tuple, a cell, ...
        attribute = None
    if attribute is not None:
        return _attribute_text(holder, attribute)
    described = f"a {_type_name(holder)}"
    if depth > 1:
        for parent in gc.get_referrers(holder):
            if isinstance(parent, types.FrameType):
                continue
            where = _describe_holder(parent, holder, depth - 1)
            if not where.startswith("a "):
                return f"{described} in {where}"
    return described


def _key_of(namespace: dict[Any, Any], target: object) -> str | None:
    # A plain loop: a comprehension naming ``target`` would hold it in a cell of its own.
    for key, value in namespace.items():
        if value is target:
            return str(key)
    return None


def _attribute_text(owner: object, name: str) -> str:
    if isinstance(owner, types.ModuleType):
        return f"the global {name} of module {owner.__name__}"
    return f"{_type_name(owner)}.{name}"


def _type_name(value: object) -> str:
    return "None" if value is None else type(value).__name__
