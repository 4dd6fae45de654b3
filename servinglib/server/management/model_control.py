"""ModelControl: Triton's model control modes over a model repository's load and unload calls."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final, final

import attrs

from servinglib.core.servable_request import ServableRequest
from servinglib.core.servable_state import ManagerState
from servinglib.errors import (
    FailedPreconditionError,
    NotFoundError,
    ServingError,
    UnavailableError,
    shortened,
)
from servinglib.server.config import ModelConfig
from servinglib.server.server_core import ServerCore

if TYPE_CHECKING:  # reading a config.pbtxt imports protobuf, which `import servinglib` does not
    from servinglib.server.triton_repository import TritonRepository

MODE_FLAG: Final = "--model_control_mode"
"""The ``servinglib-server`` flag choosing the mode."""

_UNLOAD_WAIT_S: Final = 60.0  # a reload waits this long at most for the old versions to end


class ModelControlMode(enum.Enum):
    """How the models of a repository are loaded: Triton's ``--model-control-mode``."""

    NONE = "none"  # every model at start; the repository API refused
    POLL = "poll"  # and the repository's changes followed; the repository API refused
    EXPLICIT = "explicit"  # the models named at start, then the repository API's


@final
@attrs.frozen
class ModelControl:
    """The load and unload calls of the repository API, as Triton's model control mode has them.

    In ``none`` and ``poll`` modes every call is refused (UNAVAILABLE, as
    Triton refuses them).  In ``explicit`` mode a call naming a model
    directory of ``repository`` without parameters of its own is this
    object's (:meth:`governs`): a load reads the directory now and serves
    it, a reload of a changed or failed model unloads it first (a gap: its
    versions are known by number); an unload removes it.  Other calls are
    left to remote model management.
    Immutable, so thread-safe.
    """

    repository: TritonRepository
    mode: ModelControlMode = ModelControlMode.NONE

    def governs(
        self, name: str, served: ModelConfig | None, parameters: Mapping[str, str] | None = None
    ) -> bool:
        """Whether a call on model ``name`` (``served`` now as this, or not) is this mode's.

        Outside explicit mode every call is; in it, those without ``parameters`` (a load's)
        on a model the model config does not serve.
        """
        if self.mode is not ModelControlMode.EXPLICIT:
            return True
        return not parameters and (served is None or self.repository.owns(served))

    def load(self, core: ServerCore, name: str) -> None:
        """Serves the repository's model ``name`` as it is now, and waits for it.

        An ensemble's step models that are not served are loaded first.
        Raises UnavailableError outside explicit mode, NotFoundError for a
        name the repository does not hold, FailedPreconditionError for a
        name the model config serves, what :meth:`TritonRepository.model`
        raises for a model that cannot be served, and what the load raises
        (the model is then not served: readiness is what it was).
        """
        self._check_explicit("load")
        self._load(core, name, ())

    def _load(self, core: ServerCore, name: str, loading: tuple[str, ...]) -> None:
        """Loads ``name`` after the models it calls that are not served (an ensemble's steps,
        as Triton loads them); ``loading``: the models whose load waits for this one."""
        model = self.repository.model(name)
        for required, _version in model.required_models:
            if required in loading or core.config.model(required) is not None:
                continue
            try:
                self._load(core, required, (*loading, name))
            except ServingError as error:
                raise ServingError.from_code(
                    error.code, f"Ensemble {name}: its step model {required}: {error}"
                ) from None
        current = core.config.model(name)
        if current is not None and not self.repository.owns(current):
            raise FailedPreconditionError(
                f"Model {shortened(name)} is served from the model config, not the model repository"
            )
        if current is not None and (current != model or name in core.failed_models()):
            live = core.monitor.get_live_servable_states().get(name, {})
            core.unload_model(name)
            # The manager unloads on its own thread: until the old versions are gone, the same
            # version number would count as loaded already, and the load return before the
            # new one serves.
            ended = [ServableRequest.specific(name, version) for version in live]
            core.monitor.wait_until_servables_reach_state(ended, ManagerState.END, _UNLOAD_WAIT_S)
        core.load_model(model, remove_on_failure=True)

    def unload(self, core: ServerCore, name: str) -> None:
        """Stops serving the repository's model ``name`` (nothing to do if it is not served).

        Raises UnavailableError outside explicit mode.
        """
        self._check_explicit("unload")
        current = core.config.model(name)
        if current is None or not self.repository.owns(current):
            return
        try:
            core.unload_model(name)
        except NotFoundError:  # unloaded meanwhile
            return

    def _check_explicit(self, action: str) -> None:
        if self.mode is not ModelControlMode.EXPLICIT:
            raise UnavailableError(
                f"explicit model load / unload is not allowed if polling is enabled "
                f"(the model control mode is {self.mode.value}; {action}s need "
                f"{MODE_FLAG}=explicit)"
            )
