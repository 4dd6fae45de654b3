"""VersionChoice: the version a request naming none goes to, by its model's traffic rule."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, final

import attrs

from servinglib.core.servable_request import ServableRequest
from servinglib.core.servable_state import ManagerState
from servinglib.errors import FailedPreconditionError, ServingError
from servinglib.request_extras import request_extras
from servinglib.server.model_spec import ModelSpec
from servinglib.server.observe.request_context import request_id
from servinglib.server.status import ModelStatus, VersionStatus

if TYPE_CHECKING:
    from servinglib.server.server_core import ServerCore
    from servinglib.server.traffic_rule import TrafficRule

_log = logging.getLogger("servinglib.server.traffic")


@final
class VersionChoice:
    """Looks a request's version up by its model's ``traffic`` rule, before placement.

    A request naming a version or a label, or of a model without weights,
    keeps its spec.  Otherwise the rule picks a version (sticky: by the
    request's V2 ``id``, else its ``x-request-id``); one that is not
    available now leaves the spec as it was (the policy's version answers)
    and is logged once until it is available again.  The rule is read from
    the core's config at each request, so a reload applies to the next one.
    Thread-safe; lock-free on the request path but for a fallback's log.
    """

    def __init__(self, core: ServerCore) -> None:
        self._core = core
        self._lock = threading.Lock()
        self._falling_back: frozenset[tuple[str, int]] = frozenset()  # replaced whole, _lock

    def choose(self, model_spec: ModelSpec) -> ModelSpec:
        """``model_spec``, or the same request pinned to the version the rule picks."""
        if model_spec.version is not None or model_spec.version_label is not None:
            return model_spec
        model = self._core.config.model(model_spec.name)
        if model is None or model.traffic is None:
            return model_spec
        version = model.traffic.choose(request_extras().request_id or request_id() or "")
        if version is None:
            return model_spec
        key = (model_spec.name, version)
        try:
            self._core.manager.resolve(ServableRequest.specific(model_spec.name, version))
        except ServingError:
            self._fell_back(key)
            return model_spec
        if key in self._falling_back:
            self._recovered(key)
        return attrs.evolve(model_spec, version=version)

    def _fell_back(self, key: tuple[str, int]) -> None:
        if key in self._falling_back:
            return
        with self._lock:
            self._falling_back |= {key}
        _log.warning(
            "Model %s: the traffic rule names version %d, which is not available: its share "
            "goes to the version the policy serves",
            *key,
        )

    def _recovered(self, key: tuple[str, int]) -> None:
        with self._lock:
            self._falling_back -= {key}
        _log.info("Model %s: version %d of its traffic rule is available again", *key)


def with_traffic_status(status: ModelStatus, rule: TrafficRule | None) -> ModelStatus:
    """``status`` saying, on each version the rule names that is not available, that its
    traffic goes to the policy's version (a version the model never had is listed, END).

    Each such version carries a FAILED_PRECONDITION error (its own error, if any, first).
    """
    if rule is None:
        return status
    listed = {v.version: v for v in status.versions}
    changed = False
    for version in rule.versions:
        entry = listed.get(version, VersionStatus(version, ManagerState.END))
        if entry.state is ManagerState.AVAILABLE:
            continue
        note = (
            f"the traffic rule names version {version}, which is not available: its share "
            "goes to the version the policy serves"
        )
        if entry.error is not None:
            note = f"{entry.error.message}; {note}"
        listed[version] = attrs.evolve(entry, error=FailedPreconditionError(note))
        changed = True
    if not changed:
        return status
    versions = tuple(listed[v] for v in sorted(listed, reverse=True))
    return attrs.evolve(status, versions=versions)
