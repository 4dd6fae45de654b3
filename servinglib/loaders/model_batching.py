"""How ServerCore batches models: one shared scheduler; each version wrapped as it loads."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping, Sequence
from typing import Any, final

import attrs

from servinglib.batching.batching_servable import BatchingServable
from servinglib.batching.options import BatchingParameters, read_batching_parameters
from servinglib.batching.scheduler import SharedBatchScheduler
from servinglib.core.loader import Loader
from servinglib.core.resources import ResourceAllocation
from servinglib.core.servable_data import ServableData
from servinglib.core.servable_id import ServableId
from servinglib.loaders.model_loader import ModelLoader
from servinglib.loaders.warmup import WarmupOptions
from servinglib.servable import Servable
from servinglib.sources.source_adapter import SourceAdapter

_log = logging.getLogger(__name__)

BATCHING_PARAMS_FILENAME = "batching_params.pbtxt"
"""A version directory's own batching parameters (with per-model batching parameters on)."""


@final
class ModelBatching(SourceAdapter[Loader, Loader]):
    """Sits between the platform adapters and the manager; makes each Loader serve batched.

    A model given parameters of its own by :meth:`update_models` (a Triton
    ``dynamic_batching``) is batched with them; any other with ``parameters``,
    or with ``per_model`` with its version's ``batching_params.pbtxt`` and not
    at all without one.  Owns the shared scheduler (:attr:`scheduler`);
    :meth:`close` stops it.
    Thread-safe: the models' parameters are replaced whole.
    """

    def __init__(self, parameters: BatchingParameters, *, per_model: bool = False) -> None:
        super().__init__()
        self._parameters = parameters
        self._per_model = per_model
        self._models: Mapping[str, BatchingParameters] = {}  # replaced whole
        self.scheduler = SharedBatchScheduler(
            parameters.num_batch_threads, thread_pool_name=parameters.thread_pool_name
        )

    def adapt(
        self, servable_name: str, versions: Sequence[ServableData[Loader]]
    ) -> list[ServableData[Loader]]:
        return [
            item if item.error is not None else item.with_data(self.wrap_loader(item.id, item.data))
            for item in versions
        ]

    def update_models(self, parameters: Mapping[str, BatchingParameters]) -> None:
        """Model name → its own batching parameters, for the versions loaded from now on."""
        self._models = dict(parameters)

    def wrap_loader(self, servable_id: ServableId, loader: Loader) -> Loader:
        """``loader``, made to serve its servable batched (queues named ``name/version/...``)."""
        model_loader = loader if isinstance(loader, ModelLoader) else _AsModelLoader(loader)
        model_loader.wrap_servable_with(
            lambda servable, path: self._wrap(servable_id, servable, path)
        )
        return model_loader

    def _wrap(self, servable_id: ServableId, servable: object, path: str) -> Any:  # noqa: ANN401 - a Servable or a custom Loader's own object
        if not isinstance(servable, Servable):  # a custom Loader's own object: not batchable
            return servable
        parameters = self._models.get(servable_id.name)
        if parameters is None:
            parameters = self._model_parameters(path) if self._per_model else self._parameters
        if parameters is None:
            return servable
        if all(servable.batches_itself(name) for name in servable.signatures):
            _log.info(
                "Model %s version %d batches its requests itself",
                servable_id.name,
                servable_id.version,
                extra={"model": servable_id.name, "version": servable_id.version},
            )
            return servable
        name = f"{servable_id.name}/{servable_id.version}"
        batched = BatchingServable(servable, self.scheduler, parameters, name=name)
        _log_batching_on(servable_id, parameters)
        return batched

    def _model_parameters(self, path: str) -> BatchingParameters | None:
        if not path:  # a Loader without a version directory
            return None
        file = os.path.join(path, BATCHING_PARAMS_FILENAME)
        if not os.path.exists(file):
            _log.info("No %s in %s: its model is served without batching", file, path)
            return None
        return read_batching_parameters(file)

    def close(self) -> None:
        """Stops the shared scheduler (after the batches that are running)."""
        self.scheduler.close()


@final
class _AsModelLoader(ModelLoader):
    """Any other Loader, seen as a ModelLoader so that batching wraps every loader one way.

    It has no version directory of its own: no warmup of ours (the inner
    loader's load does its own) and no per-model parameters.  A servable that
    is not a :class:`Servable` is served as it is.
    """

    def __init__(self, inner: Loader) -> None:
        super().__init__("", WarmupOptions(enabled=False))
        self._inner = inner

    def estimate_resources(self) -> ResourceAllocation:
        return self._inner.estimate_resources()

    def _load_servable(self) -> Servable:
        self._inner.load()
        servable: Servable = self._inner.servable()
        return servable

    def _unload_servable(self, servable: Servable) -> None:
        self._inner.unload()


def _log_batching_on(servable_id: ServableId, parameters: BatchingParameters) -> None:
    """One line per version batched, naming every parameter it is batched with."""
    settings = ", ".join(
        f"{field.name}={getattr(parameters, field.name)!r}"
        for field in attrs.fields(BatchingParameters)
    )
    _log.info(
        "Model %s version %d: batching on (%s)",
        servable_id.name,
        servable_id.version,
        settings,
        extra={"model": servable_id.name, "version": servable_id.version},
    )
