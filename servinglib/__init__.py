"""servinglib: TensorFlow Serving's architecture, embeddable in any Python process.

The public API lives here; subpackages hold the details.  Importing
servinglib imports neither TensorFlow nor the gRPC front ends.
"""

from servinglib.core import (
    AspiredVersionPolicy,
    AspiredVersionsManager,
    AutoVersionPolicy,
    AvailabilityPreservingPolicy,
    BasicManager,
    EventBus,
    HarnessState,
    Loader,
    LoadRetryOptions,
    Manager,
    ManagerOptions,
    ManagerState,
    Resource,
    ResourceAllocation,
    ResourcePreservingPolicy,
    ResourceTracker,
    ServableData,
    ServableHandle,
    ServableId,
    ServableRequest,
    ServableState,
    ServableStateMonitor,
    SimpleLoader,
)
from servinglib.errors import ServingError, StatusCode
from servinglib.loaders import (
    PythonModel,
    PythonPlatformConfig,
    WarmupOptions,
    register_platform,
    signature,
)
from servinglib.servable import (
    ExecutionMode,
    Servable,
    SignatureSpec,
    TensorSpec,
    call_signature,
)
from servinglib.server import (
    ModelConfig,
    ModelServerConfig,
    ModelSpec,
    ServerCore,
    ServerCoreOptions,
    read_model_server_config,
)
from servinglib.sources import (
    FileSystemStoragePathSource,
    FileSystemStoragePathSourceConfig,
    ServableToMonitor,
    ServableVersionPolicy,
    Source,
    SourceAdapter,
    UnarySourceAdapter,
    connect,
)


def __getattr__(name: str) -> str:
    """``__version__``: the installed distribution's version (PEP 440), read when first asked
    (importlib.metadata takes a fifth of the package's import time)."""
    if name != "__version__":
        raise AttributeError(f"module 'servinglib' has no attribute {name!r}")
    import importlib.metadata  # lazily: see above

    try:
        version = importlib.metadata.version("servinglib")
    except importlib.metadata.PackageNotFoundError:  # a source tree that was never installed
        version = "0+unknown"
    globals()["__version__"] = version
    return version


__all__ = [
    "AspiredVersionPolicy",
    "AspiredVersionsManager",
    "AutoVersionPolicy",
    "AvailabilityPreservingPolicy",
    "BasicManager",
    "EventBus",
    "ExecutionMode",
    "FileSystemStoragePathSource",
    "FileSystemStoragePathSourceConfig",
    "HarnessState",
    "LoadRetryOptions",
    "Loader",
    "Manager",
    "ManagerOptions",
    "ManagerState",
    "ModelConfig",
    "ModelServerConfig",
    "ModelSpec",
    "PythonModel",
    "PythonPlatformConfig",
    "Resource",
    "ResourceAllocation",
    "ResourcePreservingPolicy",
    "ResourceTracker",
    "Servable",
    "ServableData",
    "ServableHandle",
    "ServableId",
    "ServableRequest",
    "ServableState",
    "ServableStateMonitor",
    "ServableToMonitor",
    "ServableVersionPolicy",
    "ServerCore",
    "ServerCoreOptions",
    "ServingError",
    "SignatureSpec",
    "SimpleLoader",
    "Source",
    "SourceAdapter",
    "StatusCode",
    "TensorSpec",
    "UnarySourceAdapter",
    "WarmupOptions",
    "call_signature",
    "connect",
    "read_model_server_config",
    "register_platform",
    "signature",
]
