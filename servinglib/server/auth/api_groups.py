"""ApiGroup: Triton's API groups, and the one table placing every REST route and RPC in one.

A group is what ``--http_restricted_api`` and ``--grpc_restricted_protocol``
lock behind a credential.  Both transports read their group from the tables
below; a route or RPC missing from them is a bug (the front ends refuse to
start, and a test walks every route and method served).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final, final


@final
class ApiGroup(enum.Enum):
    """Triton's restricted API groups, with Triton's names (``--http_restricted_api``)."""

    HEALTH = "health"
    METADATA = "metadata"
    INFERENCE = "inference"
    SHARED_MEMORY = "shared-memory"
    MODEL_CONFIG = "model-config"
    MODEL_REPOSITORY = "model-repository"
    STATISTICS = "statistics"
    TRACE = "trace"
    LOGGING = "logging"

    @classmethod
    def named(cls, name: str) -> ApiGroup:
        """The group called ``name``; ValueError listing the groups for any other name."""
        try:
            return cls(name)
        except ValueError:
            known = ", ".join(group.value for group in cls)
            raise ValueError(f"unknown API group {name[:100]!r} (groups: {known})") from None


_H, _M, _I = ApiGroup.HEALTH, ApiGroup.METADATA, ApiGroup.INFERENCE
_CONFIG, _REPOSITORY, _STATS = ApiGroup.MODEL_CONFIG, ApiGroup.MODEL_REPOSITORY, ApiGroup.STATISTICS

REST_API_GROUPS: Final[Mapping[str, ApiGroup]] = MappingProxyType(
    {
        # KServe V2 health and the readiness of models (Triton's "health"), and TF Serving's
        # model status, which probes of TF Serving read (GET /v1/models/m).
        "health_live": _H,
        "health_ready": _H,
        "model_ready": _H,
        "status": _H,
        # Server and model metadata, and the lists of models.
        "server_metadata": _M,
        "model_metadata": _M,
        "metadata": _M,
        "list_models": _M,
        # Model calls: TF Serving's verbs, KServe V1's explain, V2 infer, generate and
        # generate_stream, and a model's custom HTTP endpoints.
        "predict": _I,
        "explain": _I,
        "classify": _I,
        "regress": _I,
        "infer": _I,
        "generate": _I,
        "generate_stream": _I,
        "custom": _I,
        "model_config": _CONFIG,
        "repository_index": _REPOSITORY,
        "repository_load": _REPOSITORY,
        "repository_unload": _REPOSITORY,
        # V2 statistics and the Prometheus scrape (request counts and latencies of the models).
        "model_statistics": _STATS,
        "metrics": _STATS,
    }
)
"""The group of each REST route, by its API name (``Route.api``; ``metrics``: the scrape)."""

GRPC_METHOD_GROUPS: Final[Mapping[str, ApiGroup]] = MappingProxyType(
    {
        "tensorflow.serving.PredictionService/Predict": _I,
        "tensorflow.serving.PredictionService/Classify": _I,
        "tensorflow.serving.PredictionService/Regress": _I,
        "tensorflow.serving.PredictionService/MultiInference": _I,
        "tensorflow.serving.PredictionService/GetModelMetadata": _M,
        "tensorflow.serving.ModelService/GetModelStatus": _H,
        "tensorflow.serving.ModelService/HandleReloadConfigRequest": _REPOSITORY,
        "inference.GRPCInferenceService/ServerLive": _H,
        "inference.GRPCInferenceService/ServerReady": _H,
        "inference.GRPCInferenceService/ModelReady": _H,
        "inference.GRPCInferenceService/ServerMetadata": _M,
        "inference.GRPCInferenceService/ModelMetadata": _M,
        "inference.GRPCInferenceService/ModelInfer": _I,
        "inference.GRPCInferenceService/ModelStreamInfer": _I,
        "inference.GRPCInferenceService/ModelConfig": _CONFIG,
        "inference.GRPCInferenceService/ModelStatistics": _STATS,
        "inference.GRPCInferenceService/RepositoryIndex": _REPOSITORY,
        "inference.GRPCInferenceService/RepositoryModelLoad": _REPOSITORY,
        "inference.GRPCInferenceService/RepositoryModelUnload": _REPOSITORY,
        # Triton's "health" also covers gRPC's health checking protocol.
        "grpc.health.v1.Health/Check": _H,
        "grpc.health.v1.Health/Watch": _H,
    }
)
"""The group of each RPC served, by ``service/method``."""
