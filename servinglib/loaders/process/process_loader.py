"""ProcessLoader: loads a version in its own process, so loading never slows what serves."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, final

import attrs

from servinglib.loaders.model_loader import ModelLoader
from servinglib.loaders.process.process_servable import ProcessServable
from servinglib.loaders.warmup import WarmupOptions
from servinglib.servable import Servable


@final
class ProcessLoader(ModelLoader):
    """A ModelLoader whose version another loader loads and serves, in a process of its own.

    ``factory`` (``"module:attribute"``) is called in the new process as
    ``factory(path, config)`` and must return a Loader serving a
    :class:`~servinglib.servable.Servable`; ``config`` must pickle.  As a
    ModelLoader, this loader wraps the served servable (batching runs in the
    server), replays the version's warmup records and estimates its RAM.
    unload() makes the process unload and exit, so the version's memory goes
    back to the machine at once.
    Thread safety: as :class:`~servinglib.core.loader.Loader` requires.
    """

    def __init__(
        self,
        path: str,
        factory: str,
        config: Any = None,  # noqa: ANN401 - the inner loader's config
        warmup: WarmupOptions | None = None,
    ) -> None:
        super().__init__(path, warmup)
        self._factory = factory
        self._config = config

    def _load_servable(self) -> Servable:
        return ProcessServable.start(self._factory, self.path, self._config)

    def _unload_servable(self, servable: Servable) -> None:
        servable.close()  # (a wrapper served in its place may not have closed it)


def process_loaders(factory: str, config: Any) -> Callable[[str], ProcessLoader]:  # noqa: ANN401 - a platform's config
    """``path`` → a ProcessLoader running ``factory(path, inner config)``, for a platform.

    ``config`` is an attrs platform config with ``model_process`` and
    ``warmup`` fields: the process gets it with ``model_process`` off and its
    warmup off, since the ProcessLoader replays the warmup records itself.
    """
    inner = attrs.evolve(config, model_process=False, warmup=WarmupOptions(enabled=False))
    return functools.partial(ProcessLoader, factory=factory, config=inner, warmup=config.warmup)
