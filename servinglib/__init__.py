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

__all__ = [
    "AspiredVersionPolicy",
    "AspiredVersionsManager",
    "AutoVersionPolicy",
    "AvailabilityPreservingPolicy",
    "BasicManager",
    "EventBus",
    "HarnessState",
    "LoadRetryOptions",
    "Loader",
    "Manager",
    "ManagerOptions",
    "ManagerState",
    "Resource",
    "ResourceAllocation",
    "ResourcePreservingPolicy",
    "ResourceTracker",
    "ServableData",
    "ServableHandle",
    "ServableId",
    "ServableRequest",
    "ServableState",
    "ServableStateMonitor",
    "ServingError",
    "SimpleLoader",
    "StatusCode",
]
