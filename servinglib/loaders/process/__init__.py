"""Model processes: a version loaded and served by a process of its own.

Loading a large model in the serving process takes its CPU, its interpreter
lock and its garbage collector from the models already serving.  A
:class:`ProcessLoader` loads the version in a new process instead, at idle
CPU priority, and serves it from there; the platforms turn it on with their
config's ``model_process`` option.
"""

from servinglib.loaders.process.process_loader import ProcessLoader as ProcessLoader
from servinglib.loaders.process.process_loader import process_loaders as process_loaders
from servinglib.loaders.process.process_servable import ProcessServable as ProcessServable

__all__ = ["ProcessLoader", "ProcessServable", "process_loaders"]
