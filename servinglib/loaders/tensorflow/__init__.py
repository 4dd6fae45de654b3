"""The "tensorflow" platform: serves TensorFlow SavedModels.

The only package of servinglib that imports TensorFlow, and only when a
model is loaded: importing it, or building its adapter, does not.
"""

from servinglib.loaders.tensorflow._runtime import tensorflow as import_tensorflow
from servinglib.loaders.tensorflow.config import (
    TensorFlowPlatformConfig as TensorFlowPlatformConfig,
)
from servinglib.loaders.tensorflow.saved_model_loader import SavedModelLoader as SavedModelLoader
from servinglib.loaders.tensorflow.saved_model_loader import make_adapter as make_adapter
from servinglib.loaders.tensorflow.tensorflow_servable import (
    TensorFlowServable as TensorFlowServable,
)

__all__ = [
    "SavedModelLoader",
    "TensorFlowPlatformConfig",
    "TensorFlowServable",
    "import_tensorflow",
    "make_adapter",
]
