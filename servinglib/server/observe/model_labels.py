"""ModelLabels: the ``model_name`` label of a request, bounded by the models a server serves."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Final, final

if TYPE_CHECKING:
    from servinglib.server.server_core import ServerCore

UNKNOWN_MODEL: Final = "__unknown__"
"""The ``model_name`` label of requests naming no configured model (one series for them all)."""


@final
class ModelLabels:
    """Maps the model name a request carried to the ``model_name`` label its series get.

    A name configured now in a core this follows is its own label; any other
    is :data:`UNKNOWN_MODEL`, so the series are bounded by the models ever
    configured, plus one.
    Thread-safe; :meth:`label` takes no lock (the cores and their configs
    are replaced whole).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cores: tuple[ServerCore, ...] = ()  # replaced whole; guarded by: _lock (writes)

    def follow(self, core: ServerCore) -> None:
        """Labels the models ``core`` has configured, now and after each reload, by their names."""
        with self._lock:
            self._cores = (*self._cores, core)

    def label(self, model_name: str) -> str:
        """``model_name`` if a followed core has it configured now, else UNKNOWN_MODEL."""
        for core in self._cores:
            if core.config.model(model_name) is not None:
                return model_name
        return UNKNOWN_MODEL

    def configured(self) -> set[str]:
        """The names of every model the followed cores have configured now."""
        return {name for core in self._cores for name in core.config.names}
