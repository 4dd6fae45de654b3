"""Model processes: a version loaded and served by a process of its own."""

from servinglib.loaders.process.process_loader import ProcessLoader as ProcessLoader
from servinglib.loaders.process.process_loader import process_loaders as process_loaders
from servinglib.loaders.process.process_servable import ProcessServable as ProcessServable

__all__ = ["ProcessLoader", "ProcessServable", "process_loaders"]
