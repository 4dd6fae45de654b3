"""Loader: how a manager loads, serves and unloads one servable version."""

from __future__ import annotations

import abc
from typing import Any

from servinglib.core.resources import ResourceAllocation


class Loader(abc.ABC):
    """Loads one servable version, hands out the loaded object, and unloads it.

    A manager owns each Loader it is given: it calls :meth:`estimate_resources`
    (any time), then :meth:`load` (perhaps several times, after failures, when
    retries are configured), :meth:`servable` while the version serves, and
    :meth:`unload` once, after the last handle to the servable is released.

    Important: :meth:`load` and :meth:`unload` of one loader are never called
    concurrently; :meth:`servable` is only called between a successful
    :meth:`load` and :meth:`unload`.
    Thread safety: :meth:`estimate_resources` and :meth:`servable` may be
    called from any thread; load and unload run on the manager's pools.
    """

    @abc.abstractmethod
    def estimate_resources(self) -> ResourceAllocation:
        """Upper bound of what load() will use.

        Important: must never increase over the loader's lifetime, and must be
        cheap: it is called before load, to decide whether the load fits.
        Thread safety: may be called from any thread, also while load() runs.
        """

    @abc.abstractmethod
    def load(self) -> None:
        """Makes the servable ready to serve.

        Raise (preferably a :class:`servinglib.errors.ServingError`) on failure;
        a failed load may be tried again.  Raise an error retrying cannot heal
        (DataLossError for a corrupt model, InvalidArgumentError for an
        unparsable one or a bad signature; also FailedPreconditionError,
        UnimplementedError, ResourceExhaustedError) and the default retry
        predicate, ``retry_unless_permanent``, does not retry it.
        Important: after a failed load, the loader must hold nothing (load
        cleans up after itself).
        """

    @abc.abstractmethod
    def unload(self) -> None:
        """Releases everything :meth:`load` acquired.

        Requires: the last successful :meth:`load` was not followed by an unload.
        Important: should not raise; an exception is logged and ignored.
        """

    @abc.abstractmethod
    def servable(self) -> Any:  # noqa: ANN401 - a servable is whatever the platform serves
        """The loaded object requests are served with.

        Requires: called between a successful load() and unload().
        Thread safety: may be called from any thread.
        """
