"""The server: ServerCore and the model config it serves."""

from servinglib.server.config import ModelConfig as ModelConfig
from servinglib.server.config import ModelServerConfig as ModelServerConfig
from servinglib.server.config import parse_model_server_config as parse_model_server_config
from servinglib.server.config import read_model_server_config as read_model_server_config
from servinglib.server.config_file_watcher import ConfigFileStatus as ConfigFileStatus
from servinglib.server.config_file_watcher import (
    ModelConfigFileWatcher as ModelConfigFileWatcher,
)
from servinglib.server.logging_config import LoggingConfig as LoggingConfig
from servinglib.server.management.model_management import ModelManagement as ModelManagement
from servinglib.server.management.model_management import (
    ModelManagementOptions as ModelManagementOptions,
)
from servinglib.server.model_spec import ModelSpec as ModelSpec
from servinglib.server.observe.request_record import RequestObserver as RequestObserver
from servinglib.server.observe.request_record import RequestRecord as RequestRecord
from servinglib.server.observe.request_record import record_request as record_request
from servinglib.server.plane.data_plane import DataPlane as DataPlane
from servinglib.server.plane.data_plane import InferenceResult as InferenceResult
from servinglib.server.plane.metadata import signature_def_map as signature_def_map
from servinglib.server.plane.metadata import v2_model_metadata as v2_model_metadata
from servinglib.server.plane.model_questions import ModelQuestions as ModelQuestions
from servinglib.server.plane.model_questions import ModelReadiness as ModelReadiness
from servinglib.server.server_core import ServerCore as ServerCore
from servinglib.server.server_core_options import ServerCoreOptions as ServerCoreOptions
from servinglib.server.status import ModelMetadata as ModelMetadata
from servinglib.server.status import ModelStatus as ModelStatus
from servinglib.server.status import VersionStatus as VersionStatus

__all__ = [
    "ConfigFileStatus",
    "DataPlane",
    "InferenceResult",
    "LoggingConfig",
    "ModelConfig",
    "ModelConfigFileWatcher",
    "ModelManagement",
    "ModelManagementOptions",
    "ModelMetadata",
    "ModelQuestions",
    "ModelReadiness",
    "ModelServerConfig",
    "ModelSpec",
    "ModelStatus",
    "RequestObserver",
    "RequestRecord",
    "ServerCore",
    "ServerCoreOptions",
    "VersionStatus",
    "parse_model_server_config",
    "read_model_server_config",
    "record_request",
    "signature_def_map",
    "v2_model_metadata",
]
