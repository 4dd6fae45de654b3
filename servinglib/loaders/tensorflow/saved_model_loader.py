"""SavedModelLoader: loads one SavedModel version directory with TensorFlow."""

from __future__ import annotations

import functools
import gc
import logging
import time
from typing import final

from servinglib.core.loader import Loader
from servinglib.loaders.model_loader import ModelLoader
from servinglib.loaders.process import process_loaders
from servinglib.loaders.tensorflow._errors import load_error
from servinglib.loaders.tensorflow._runtime import configure_threads, tensorflow
from servinglib.loaders.tensorflow.config import TensorFlowPlatformConfig
from servinglib.loaders.tensorflow.signatures import read_meta_graph, signature_specs
from servinglib.loaders.tensorflow.tensorflow_servable import TensorFlowServable
from servinglib.servable import Servable
from servinglib.sources.source import StoragePath
from servinglib.sources.source_adapter import FunctionSourceAdapter, SourceAdapter

_log = logging.getLogger(__name__)

_FACTORY = "servinglib.loaders.tensorflow.saved_model_loader:SavedModelLoader"


def make_adapter(config: TensorFlowPlatformConfig | None) -> SourceAdapter[StoragePath, Loader]:
    """The "tensorflow" platform's adapter: a SavedModelLoader per version directory.

    With ``config.model_process``, a ProcessLoader running the SavedModelLoader
    in a process of its own per version.  Creating it does not import
    TensorFlow; the first load does.
    """
    config = config if config is not None else TensorFlowPlatformConfig()
    if config.model_process:
        return FunctionSourceAdapter(process_loaders(_FACTORY, config))
    return FunctionSourceAdapter(functools.partial(SavedModelLoader, config=config))


@final
class SavedModelLoader(ModelLoader):
    """Loads the SavedModel in a version directory and serves its signatures.

    load() loads the MetaGraph tagged ``config.saved_model_tags`` with
    ``tf.saved_model.load``, then replays the directory's warmup requests.
    Missing files (maybe still being copied in) are NOT_FOUND and retried;
    what retrying cannot heal is DATA_LOSS (a corrupt model) or
    INVALID_ARGUMENT (no MetaGraph with those tags, mismatched signatures).
    unload() drops the model and runs a full garbage collection (the restored
    functions hold the variables in reference cycles).
    Thread safety: as :class:`~servinglib.core.loader.Loader` requires.
    """

    def __init__(self, path: str, config: TensorFlowPlatformConfig | None = None) -> None:
        config = config if config is not None else TensorFlowPlatformConfig()
        super().__init__(path, config.warmup)
        self._config = config

    @classmethod
    def import_runtime(cls) -> None:
        tensorflow()

    def start_runtime(self) -> None:
        configure_threads(
            self._config.intra_op_parallelism_threads, self._config.inter_op_parallelism_threads
        )
        tf = tensorflow()
        (tf.constant(0.0) + 0.0).numpy()  # TF makes its context and thread pools on a first op

    def _load_servable(self) -> Servable:
        started = time.perf_counter()
        self.start_runtime()  # (already done in a model process: then a no-op and one tiny op)
        tf = tensorflow()
        tags = self._config.saved_model_tags
        specs = signature_specs(read_meta_graph(self.path, tags))
        try:
            model = tf.saved_model.load(self.path, tags=list(tags))
        except Exception as exc:
            raise load_error(exc, self.path) from exc
        servable = TensorFlowServable(model, specs)
        _log.info(
            "loaded SavedModel %s (%d signatures) in %.3f s",
            self.path,
            len(specs),
            time.perf_counter() - started,
        )
        return servable

    def _unload_servable(self, servable: Servable) -> None:
        if isinstance(servable, TensorFlowServable):
            servable.release()
        del servable
        gc.collect()
