"""Manager: what request handlers need from whatever manages servables."""

from __future__ import annotations

import abc
from typing import Any

from servinglib.core.servable_handle import ServableHandle
from servinglib.core.servable_id import ServableId
from servinglib.core.servable_request import ServableRequest


class Manager(abc.ABC):
    """Hands out handles to available servables.

    Thread safety: implementations must be thread-safe, and
    :meth:`servable_handle` must not block on loads or unloads.
    """

    @abc.abstractmethod
    def servable_handle(self, request: ServableRequest) -> ServableHandle[Any]:
        """A handle to the version ``request`` selects among available ones.

        Raises NotFoundError for a name (or specific version) the manager does
        not know or whose load failed (naming the load's error),
        UnavailableError for a known version not serving (yet or any more);
        each message names the servable.
        """

    @abc.abstractmethod
    def list_available_servable_ids(self) -> list[ServableId]:
        """Every version a handle can be obtained for now, sorted."""
