"""Sources of aspired versions: the typed Source → Router → Adapter → manager pipeline."""

from servinglib.sources.base_path_source import BasePathSource as BasePathSource
from servinglib.sources.file_system_storage_path_source import (
    FileSystemStoragePathSource as FileSystemStoragePathSource,
)
from servinglib.sources.remote_storage_path_source import (
    RemoteStoragePathSource as RemoteStoragePathSource,
)
from servinglib.sources.source import Source as Source
from servinglib.sources.source import StoragePath as StoragePath
from servinglib.sources.source_adapter import (
    ErrorInjectingSourceAdapter as ErrorInjectingSourceAdapter,
)
from servinglib.sources.source_adapter import FunctionSourceAdapter as FunctionSourceAdapter
from servinglib.sources.source_adapter import SourceAdapter as SourceAdapter
from servinglib.sources.source_adapter import UnarySourceAdapter as UnarySourceAdapter
from servinglib.sources.source_router import DynamicSourceRouter as DynamicSourceRouter
from servinglib.sources.source_router import SourceRouter as SourceRouter
from servinglib.sources.source_router import StaticSourceRouter as StaticSourceRouter
from servinglib.sources.static_storage_path_source import (
    StaticStoragePathSource as StaticStoragePathSource,
)
from servinglib.sources.storage_path_source_config import (
    FileSystemStoragePathSourceConfig as FileSystemStoragePathSourceConfig,
)
from servinglib.sources.storage_path_source_config import ServableToMonitor as ServableToMonitor
from servinglib.sources.target import Target as Target
from servinglib.sources.target import TargetBase as TargetBase
from servinglib.sources.target import connect as connect
from servinglib.sources.version_check import VersionCheck as VersionCheck
from servinglib.sources.version_check import holds_a_file as holds_a_file
from servinglib.sources.version_policy import ServableVersionPolicy as ServableVersionPolicy
from servinglib.sources.version_policy import VersionPolicyKind as VersionPolicyKind

__all__ = [
    "BasePathSource",
    "DynamicSourceRouter",
    "ErrorInjectingSourceAdapter",
    "FileSystemStoragePathSource",
    "FileSystemStoragePathSourceConfig",
    "FunctionSourceAdapter",
    "RemoteStoragePathSource",
    "ServableToMonitor",
    "ServableVersionPolicy",
    "Source",
    "SourceAdapter",
    "SourceRouter",
    "StaticSourceRouter",
    "StaticStoragePathSource",
    "StoragePath",
    "Target",
    "TargetBase",
    "UnarySourceAdapter",
    "VersionCheck",
    "VersionPolicyKind",
    "connect",
    "holds_a_file",
]
