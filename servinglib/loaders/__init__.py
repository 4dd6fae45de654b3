"""Loaders: what gets served — the platform registry, Python models, warmup.

The TensorFlow SavedModel platform lives in :mod:`servinglib.loaders.tensorflow`,
which imports TensorFlow only when a model is loaded.
"""

from servinglib.loaders.model_loader import ModelLoader as ModelLoader
from servinglib.loaders.python import PythonLoader as PythonLoader
from servinglib.loaders.python import PythonModel as PythonModel
from servinglib.loaders.python import PythonPlatformConfig as PythonPlatformConfig
from servinglib.loaders.python import PythonServable as PythonServable
from servinglib.loaders.python import signature as signature
from servinglib.loaders.python_http import http_handler as http_handler
from servinglib.loaders.python_sequences import Sequences as Sequences
from servinglib.loaders.registry import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP
from servinglib.loaders.registry import Platform as Platform
from servinglib.loaders.registry import PlatformRegistry as PlatformRegistry
from servinglib.loaders.registry import default_registry as default_registry
from servinglib.loaders.registry import register_platform as register_platform
from servinglib.loaders.warmup import WarmupOptions as WarmupOptions
from servinglib.loaders.warmup import run_warmup as run_warmup

__all__ = [
    "ENTRY_POINT_GROUP",
    "ModelLoader",
    "Platform",
    "PlatformRegistry",
    "PythonLoader",
    "PythonModel",
    "PythonPlatformConfig",
    "PythonServable",
    "Sequences",
    "WarmupOptions",
    "default_registry",
    "http_handler",
    "register_platform",
    "run_warmup",
    "signature",
]
