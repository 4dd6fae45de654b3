"""deploy/kserve: the runtimes and InferenceServices use only the fields KServe defines.

KServe's CRDs are not in kubernetes-validate, so the fields are checked against KServe's Go types
(kserve/kserve, which generates its CRDs from them):

- ``pkg/apis/serving/v1alpha1/servingruntime_types.go``: ``ServingRuntimeSpec`` (the spec of both
  ServingRuntime and ClusterServingRuntime): ``supportedModelFormats``, ``multiModel``,
  ``disabled``, ``protocolVersions``, ``workerSpec``, the inlined ``ServingRuntimePodSpec``
  (``containers`` (required), ``volumes``, ``nodeSelector``, ``affinity``, ``tolerations``,
  ``labels``, ``annotations``, ``imagePullSecrets``, ``hostIPC``), ``grpcEndpoint``,
  ``grpcDataEndpoint``, ``httpDataEndpoint``, ``replicas``, ``storageHelper``,
  ``builtInAdapter``; ``SupportedModelFormat``: ``name`` (required), ``version``,
  ``autoSelect``, ``priority`` (>= 1).
- ``pkg/constants``: ``InferenceServiceProtocol`` values ``v1``, ``v2``, ``grpc-v1``, ``grpc-v2``.
- ``pkg/apis/serving/v1beta1``: ``PredictorSpec.model`` (``ModelSpec``: ``modelFormat`` with
  ``name`` and ``version``, ``runtime``, and ``PredictorExtensionSpec``'s ``storageUri``,
  ``runtimeVersion``, ``protocolVersion``, ``storage``, plus an inlined core/v1 ``Container``);
  ``ComponentExtensionSpec``'s ``minReplicas``, ``maxReplicas``, ``scaleTarget``,
  ``scaleMetric``, ``containerConcurrency``, ``timeout``, ``canaryTrafficPercent``, ...
- ``pkg/apis/serving/v1alpha1/trained_model.go``: ``TrainedModelSpec`` ``inferenceService``,
  ``model`` (``storageUri``, ``framework``, ``memory``).

The containers, which are core/v1 Containers, are validated with kubernetes-validate as a Pod's.
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes_validate import utils as kubernetes_validate

from servinglib.server.cli import parse_flags
from tests.deploy.manifests import KSERVE, documents, flag_value, one
from tests.deploy.test_manifests import KUBERNETES_VERSIONS

SERVING_RUNTIME_SPEC = {
    "supportedModelFormats",
    "multiModel",
    "disabled",
    "protocolVersions",
    "workerSpec",
    "containers",
    "volumes",
    "nodeSelector",
    "affinity",
    "tolerations",
    "labels",
    "annotations",
    "imagePullSecrets",
    "hostIPC",
    "grpcEndpoint",
    "grpcDataEndpoint",
    "httpDataEndpoint",
    "replicas",
    "storageHelper",
    "builtInAdapter",
}
SUPPORTED_MODEL_FORMAT = {"name", "version", "autoSelect", "priority"}
PROTOCOLS = {"v1", "v2", "grpc-v1", "grpc-v2"}
MODEL_SPEC = {
    "modelFormat",
    "runtime",
    "storageUri",
    "runtimeVersion",
    "protocolVersion",
    "storage",
}
CONTAINER_FIELDS_IN_MODEL = {"args", "env", "resources", "command", "image", "ports"}
COMPONENT_EXTENSION = {
    "minReplicas",
    "maxReplicas",
    "scaleTarget",
    "scaleMetric",
    "containerConcurrency",
    "timeout",
    "canaryTrafficPercent",
    "logger",
    "batcher",
    "labels",
    "annotations",
    "deploymentStrategy",
}
TRAINED_MODEL = {"storageUri", "framework", "memory"}

RUNTIMES = [
    one(KSERVE, "ServingRuntime"),
    one(KSERVE, "ClusterServingRuntime"),
]


def _as_pod(containers: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "x"},
        "spec": {"containers": containers},
    }


@pytest.mark.parametrize("runtime", RUNTIMES, ids=lambda r: r["kind"])
def test_runtime_spec_uses_kserve_fields(runtime: dict[str, Any]) -> None:
    """Only ServingRuntimeSpec's fields; formats tensorflow and python; v1, v2 and grpc-v2."""
    assert runtime["apiVersion"] == "serving.kserve.io/v1alpha1"
    spec = runtime["spec"]
    assert set(spec) <= SERVING_RUNTIME_SPEC
    for model_format in spec["supportedModelFormats"]:
        assert set(model_format) <= SUPPORTED_MODEL_FORMAT
        assert model_format.get("priority", 1) >= 1
    assert [f["name"] for f in spec["supportedModelFormats"]] == ["tensorflow", "python"]
    assert spec["protocolVersions"] == ["v1", "v2", "grpc-v2"]
    assert set(spec["protocolVersions"]) <= PROTOCOLS


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("runtime", RUNTIMES, ids=lambda r: r["kind"])
def test_runtime_containers_are_valid_kubernetes_containers(
    runtime: dict[str, Any], version: str
) -> None:
    """The runtime's containers validate strictly as a Pod's containers."""
    kubernetes_validate.validate(_as_pod(runtime["spec"]["containers"]), version, strict=True)


def test_runtime_arguments_are_kserves_and_parse() -> None:
    """KServe's arguments and ports (HTTP 8080, gRPC 9000); the whole line parses as flags."""
    [container] = RUNTIMES[0]["spec"]["containers"]
    args = container["args"]
    assert container["name"] == "kserve-container"
    assert "--model_name={{.Name}}" in args
    assert flag_value(args, "--model_base_path") == "/mnt/models"
    flags = parse_flags([a.replace("{{.Name}}", "m") for a in args])
    assert (flags.rest_api_port, flags.port, flags.model_name) == (8080, 9000, "m")
    assert [p["containerPort"] for p in container["ports"]] == [8080]
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"


def test_the_cluster_runtime_is_the_same_runtime() -> None:
    """ClusterServingRuntime and ServingRuntime have the same name and spec."""
    namespaced, cluster = RUNTIMES
    assert namespaced["metadata"]["name"] == cluster["metadata"]["name"]
    assert namespaced["spec"] == cluster["spec"]


@pytest.mark.parametrize("file", ["inferenceservice.yaml", "inferenceservice-multimodel.yaml"])
def test_inference_services_use_the_runtime(file: str) -> None:
    """Each InferenceService names our runtime, a format and protocol it serves, known fields."""
    runtime = RUNTIMES[0]
    isvc, *trained = documents(KSERVE / file)
    assert (isvc["apiVersion"], isvc["kind"]) == ("serving.kserve.io/v1beta1", "InferenceService")
    predictor = isvc["spec"]["predictor"]
    assert set(predictor) <= COMPONENT_EXTENSION | {"model"}
    model = predictor["model"]
    assert set(model) <= MODEL_SPEC | CONTAINER_FIELDS_IN_MODEL
    assert model["runtime"] == runtime["metadata"]["name"]
    formats = {(f["name"], f["version"]) for f in runtime["spec"]["supportedModelFormats"]}
    assert (model["modelFormat"]["name"], model["modelFormat"]["version"]) in formats
    assert model["protocolVersion"] in runtime["spec"]["protocolVersions"]
    runtime_args = runtime["spec"]["containers"][0]["args"]
    parse_flags([a.replace("{{.Name}}", "m") for a in runtime_args + model.get("args", [])])
    for doc in trained:
        assert (doc["apiVersion"], doc["kind"]) == ("serving.kserve.io/v1alpha1", "TrainedModel")
        assert doc["spec"]["inferenceService"] == isvc["metadata"]["name"]
        assert set(doc["spec"]["model"]) <= TRAINED_MODEL


def test_the_multimodel_service_turns_management_on_for_mnt_models() -> None:
    """The model agent's load and unload calls need remote management, confined to /mnt/models."""
    isvc, _ = documents(KSERVE / "inferenceservice-multimodel.yaml")
    flags = parse_flags(
        ["--model_base_path=/mnt/models", *isvc["spec"]["predictor"]["model"]["args"]]
    )
    assert flags.allow_remote_model_management
    assert flags.model_management_roots == "/mnt/models"
