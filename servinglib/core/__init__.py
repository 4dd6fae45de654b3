"""The servable lifecycle: loaders, harnesses, managers, policies, resources, states."""

from servinglib.core.aspired_version_policy import Action as Action
from servinglib.core.aspired_version_policy import (
    AspiredServableStateSnapshot as AspiredServableStateSnapshot,
)
from servinglib.core.aspired_version_policy import AspiredVersionPolicy as AspiredVersionPolicy
from servinglib.core.aspired_version_policy import ServableAction as ServableAction
from servinglib.core.aspired_versions_manager import (
    AspiredVersionsManager as AspiredVersionsManager,
)
from servinglib.core.availability_preserving_policy import (
    AvailabilityPreservingPolicy as AvailabilityPreservingPolicy,
)
from servinglib.core.basic_manager import BasicManager as BasicManager
from servinglib.core.basic_manager import ManagerOptions as ManagerOptions
from servinglib.core.basic_manager import ServableStateSnapshot as ServableStateSnapshot
from servinglib.core.clock import Clock as Clock
from servinglib.core.clock import SystemClock as SystemClock
from servinglib.core.clock import Timer as Timer
from servinglib.core.event_bus import EventBus as EventBus
from servinglib.core.event_bus import Subscription as Subscription
from servinglib.core.loader import Loader as Loader
from servinglib.core.loader_harness import HarnessState as HarnessState
from servinglib.core.loader_harness import LoaderHarness as LoaderHarness
from servinglib.core.loader_harness import LoadRetryOptions as LoadRetryOptions
from servinglib.core.loader_harness import retry_unless_permanent as retry_unless_permanent
from servinglib.core.manager import Manager as Manager
from servinglib.core.resource_preserving_policy import (
    ResourcePreservingPolicy as ResourcePreservingPolicy,
)
from servinglib.core.resource_tracker import ResourceStatistics as ResourceStatistics
from servinglib.core.resource_tracker import ResourceTracker as ResourceTracker
from servinglib.core.resources import Resource as Resource
from servinglib.core.resources import ResourceAllocation as ResourceAllocation
from servinglib.core.servable_data import AspiredVersionsCallback as AspiredVersionsCallback
from servinglib.core.servable_data import ServableData as ServableData
from servinglib.core.servable_handle import ServableHandle as ServableHandle
from servinglib.core.servable_id import ServableId as ServableId
from servinglib.core.servable_request import AutoVersionPolicy as AutoVersionPolicy
from servinglib.core.servable_request import ServableRequest as ServableRequest
from servinglib.core.servable_state import ManagerState as ManagerState
from servinglib.core.servable_state import ServableState as ServableState
from servinglib.core.servable_state_monitor import ServableStateAndTime as ServableStateAndTime
from servinglib.core.servable_state_monitor import ServableStateMonitor as ServableStateMonitor
from servinglib.core.simple_loader import SimpleLoader as SimpleLoader
from servinglib.core.storage_condition import StorageCondition as StorageCondition

__all__ = [
    "Action",
    "AspiredServableStateSnapshot",
    "AspiredVersionPolicy",
    "AspiredVersionsCallback",
    "AspiredVersionsManager",
    "AutoVersionPolicy",
    "AvailabilityPreservingPolicy",
    "BasicManager",
    "Clock",
    "EventBus",
    "HarnessState",
    "LoadRetryOptions",
    "Loader",
    "LoaderHarness",
    "Manager",
    "ManagerOptions",
    "ManagerState",
    "Resource",
    "ResourceAllocation",
    "ResourcePreservingPolicy",
    "ResourceStatistics",
    "ResourceTracker",
    "ServableAction",
    "ServableData",
    "ServableHandle",
    "ServableId",
    "ServableRequest",
    "ServableState",
    "ServableStateAndTime",
    "ServableStateMonitor",
    "ServableStateSnapshot",
    "SimpleLoader",
    "StorageCondition",
    "Subscription",
    "SystemClock",
    "Timer",
    "retry_unless_permanent",
]
