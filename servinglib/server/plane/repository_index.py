"""The index of Triton's model repository extension: each model version and its state."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final, final

import attrs

from servinglib.core.servable_state import ManagerState
from servinglib.errors import NotFoundError
from servinglib.server.server_core import ServerCore
from servinglib.server.status import VersionStatus

V2_REPOSITORY_STATE: Final[dict[ManagerState, str]] = {
    ManagerState.START: "LOADING",
    ManagerState.LOADING: "LOADING",
    ManagerState.AVAILABLE: "READY",
    ManagerState.UNLOADING: "UNLOADING",
    ManagerState.END: "UNAVAILABLE",
}
"""Our version states in the repository extension's words."""


@final
@attrs.frozen
class RepositoryEntry:
    """One row of the index: a model version (or a model without versions) and its state."""

    name: str
    version: str
    state: str
    reason: str


def repository_index(
    core: ServerCore, names: Iterable[str] | None = None, *, ready_only: bool = False
) -> list[RepositoryEntry]:
    """Each version of each model with its state; a model without versions as UNAVAILABLE.

    ``names``: the models to list (default: every model the core has
    served, :meth:`ServerCore.known_models`, sorted).  ``ready_only``: only
    READY versions (the extension's ``ready`` flag).
    """
    if names is None:
        names = sorted(core.known_models())
    index: list[RepositoryEntry] = []
    for name in names:
        versions: tuple[VersionStatus, ...]
        try:
            status = core.model_status(name)
        except NotFoundError:
            versions, problem = (), "unloaded"
        else:
            versions = status.versions
            problem = status.error.message if status.error is not None else ""
        for version in versions:
            state = V2_REPOSITORY_STATE[version.state]
            if ready_only and state != "READY":
                continue
            reason = version.error.message if version.error is not None else ""
            index.append(RepositoryEntry(name, str(version.version), state, reason))
        if not versions and not ready_only:
            index.append(RepositoryEntry(name, "", "UNAVAILABLE", problem))
    return index
