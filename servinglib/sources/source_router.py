"""SourceRouter: splits one aspired-versions stream into several by servable name."""

from __future__ import annotations

import abc
import threading
from collections.abc import Mapping, Sequence
from typing import Generic, TypeVar, final

from servinglib.core.argument_types import check_servable_data
from servinglib.core.servable_data import ServableData
from servinglib.errors import InvalidArgumentError
from servinglib.sources.source import Source
from servinglib.sources.target import TargetBase

T = TypeVar("T")


class SourceRouter(TargetBase[T], Generic[T]):
    """A Target with several output ports (Sources); each servable name goes to one port.

    This is how one file-system source feeds one adapter per platform.
    Connect each of :attr:`output_ports` to a target.
    Thread-safe if :meth:`route` is.
    """

    def __init__(self, num_output_ports: int) -> None:
        if num_output_ports < 1:
            raise InvalidArgumentError("a SourceRouter needs at least one output port")
        self._ports: tuple[_Port[T], ...] = tuple(_Port() for _ in range(num_output_ports))

    @property
    def output_ports(self) -> Sequence[Source[T]]:
        """The ports, in order; fixed for the router's life."""
        return self._ports

    def set_aspired_versions(self, servable_name: str, versions: Sequence[ServableData[T]]) -> None:
        for item in versions:
            check_servable_data(item, f"{type(self).__name__}.set_aspired_versions()")
        self._ports[self.route(servable_name)].emit_aspired_versions(servable_name, versions)

    @abc.abstractmethod
    def route(self, servable_name: str) -> int:
        """The index of the port ``servable_name`` goes to."""


@final
class StaticSourceRouter(SourceRouter[T], Generic[T]):
    """Routes by substring: port i takes names containing ``route_substrings[i]`` (first match).

    Names matching none go to the extra last port.  Thread-safe.
    """

    def __init__(self, route_substrings: Sequence[str]) -> None:
        super().__init__(len(route_substrings) + 1)
        self._substrings = tuple(route_substrings)

    def route(self, servable_name: str) -> int:
        for port, substring in enumerate(self._substrings):
            if substring in servable_name:
                return port
        return len(self._substrings)


@final
class DynamicSourceRouter(SourceRouter[T], Generic[T]):
    """Routes by exact name through a table that can change at run time.

    Names not in the table go to the last port (the default port), so the
    table maps names to ports ``0 .. num_output_ports - 2``.  A route change
    applies to the next emission for that name; nothing is re-sent.
    Thread-safe.
    """

    def __init__(self, num_output_ports: int, routes: Mapping[str, int] | None = None) -> None:
        super().__init__(num_output_ports)
        self._lock = threading.Lock()
        self._routes: Mapping[str, int] = {}  # replaced whole under _lock
        self.update_routes(routes or {})

    @property
    def routes(self) -> Mapping[str, int]:
        """The current table (a copy)."""
        return dict(self._routes)

    def update_routes(self, routes: Mapping[str, int]) -> None:
        """Replaces the table; InvalidArgumentError (table unchanged) for a bad port."""
        default_port = len(self._ports) - 1
        for name, port in routes.items():
            if not 0 <= port < default_port:
                raise InvalidArgumentError(
                    f"Route of servable {name} to port {port} is out of range: ports "
                    f"0..{default_port - 1} take routes, port {default_port} is the default"
                )
        with self._lock:
            self._routes = dict(routes)

    def route(self, servable_name: str) -> int:
        return self._routes.get(servable_name, len(self._ports) - 1)


@final
class _Port(Source[T], Generic[T]):
    """One output of a router: a Source the router emits on."""
