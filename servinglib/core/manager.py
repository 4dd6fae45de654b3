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

    def resolve(self, request: ServableRequest) -> ServableId:
        """The version :meth:`servable_handle` would give for ``request`` now, without a handle.

        For questions about what serves (readiness, which version a label
        means) that must not count as requests.  Raises what
        servable_handle raises.  This default takes a handle and releases
        it; the managers of this package look the version up without one.
        """
        with self.servable_handle(request) as handle:
            return handle.id

    @abc.abstractmethod
    def list_available_servable_ids(self) -> list[ServableId]:
        """Every version a handle can be obtained for now, sorted."""
