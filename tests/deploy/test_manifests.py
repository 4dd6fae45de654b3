"""deploy/kubernetes validates offline against Kubernetes' API schemas, and its parts fit together.

Schemas: the ``kubernetes-validate`` package's copies of the OpenAPI schemas, strict (an unknown
field is an error), for the oldest and the newest Kubernetes version we state support for.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes_validate import utils as kubernetes_validate

from servinglib.server.cli import parse_flags
from servinglib.server.config import read_model_server_config
from servinglib.server.observe.metrics import DEFAULT_METRICS_PATH
from tests.deploy.manifests import KSERVE, KUBERNETES, documents, manifests, one

KUBERNETES_VERSIONS = ("1.31.0", "1.37.0")
"""The Kubernetes versions the manifests are validated for: the oldest we support, the newest."""

# After SIGTERM the server may take drain delay + grace, then 1 s for cut-off replies and 10 s
# for unloading (servinglib.server.cli.model_server's _CUT_OFF_S and _UNLOAD_S).
_AFTER_GRACE_S = 1 + 10


def _container(deployment: dict[str, Any]) -> dict[str, Any]:
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    return container


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize(
    ("path", "manifest"),
    manifests(KUBERNETES),
    ids=lambda value: value.name if isinstance(value, Path) else value["kind"],
)
def test_every_manifest_validates_strictly(
    path: Path, manifest: dict[str, Any], version: str
) -> None:
    """Each Kubernetes manifest (examples included) is valid for the stated version, strictly."""
    assert kubernetes_validate.validate(manifest, version, strict=True) == version.rsplit(".", 1)[0]
    assert path.suffix == ".yaml"


def test_a_wrong_field_fails_the_validation() -> None:
    """The validation can fail: a misspelt probe field is rejected."""
    deployment = one(KUBERNETES, "Deployment")
    _container(deployment)["readinessProbe"]["periodSecond"] = 2
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, KUBERNETES_VERSIONS[0], strict=True)


def test_the_kustomization_applies_every_manifest() -> None:
    """kubectl apply -k deploy/kubernetes applies each file of the directory (not the examples)."""
    [kustomization] = documents(KUBERNETES / "kustomization.yaml")
    files = {p.name for p in KUBERNETES.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(files)
    assert (
        kustomization["images"][0]["name"]
        == _container(one(KUBERNETES, "Deployment"))["image"].split(":")[0]
    )


def test_the_container_arguments_are_valid_server_flags() -> None:
    """The Deployment's args parse as servinglib-server's command line."""
    flags = parse_flags(_container(one(KUBERNETES, "Deployment"))["args"])
    assert (flags.port, flags.rest_api_port, flags.enable_metrics) == (8500, 8501, True)
    assert flags.model_config_file == "/etc/servinglib/models.config"


def test_models_from_a_bucket_are_cached_on_a_volume_of_their_own() -> None:
    """--model_cache_dir is the mount of an emptyDir of its own, gigabytes, not the 256 MiB /tmp."""
    deployment = one(KUBERNETES, "Deployment")
    container = _container(deployment)
    cache = parse_flags(container["args"]).model_cache_dir
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert cache == "/var/cache/servinglib"
    volume = volumes[mounts[cache]]
    assert volume["emptyDir"]["sizeLimit"].endswith("Gi")


def test_termination_grace_outlasts_the_drain() -> None:
    """terminationGracePeriodSeconds > drain delay + shutdown grace + cut-off + unload time."""
    deployment = one(KUBERNETES, "Deployment")
    flags = parse_flags(_container(deployment)["args"])
    needed = flags.drain_delay_seconds + flags.shutdown_grace_seconds + _AFTER_GRACE_S
    assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] > needed
    # The readiness probe sees SIGTERM's "not ready" well within the drain delay.
    readiness = _container(deployment)["readinessProbe"]
    assert readiness["periodSeconds"] * readiness["failureThreshold"] < flags.drain_delay_seconds


def test_probes_use_the_health_endpoints_and_startup_allows_long_loads() -> None:
    """Startup and liveness on /v2/health/live, readiness on /v2/health/ready, 5 min to start."""
    container = _container(one(KUBERNETES, "Deployment"))
    paths = {
        probe: container[probe]["httpGet"]["path"]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe")
    }
    assert paths == {
        "startupProbe": "/v2/health/live",
        "readinessProbe": "/v2/health/ready",
        "livenessProbe": "/v2/health/live",
    }
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] >= 300


def test_the_pod_meets_the_restricted_security_standard() -> None:
    """Non-root, no privilege escalation, every capability dropped, RuntimeDefault seccomp."""
    spec = one(KUBERNETES, "Deployment")["spec"]["template"]["spec"]
    security = _container(one(KUBERNETES, "Deployment"))["securityContext"]
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["runAsUser"] != 0
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert security["allowPrivilegeEscalation"] is False
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["readOnlyRootFilesystem"] is True
    assert spec["automountServiceAccountToken"] is False
    assert {"requests", "limits"} <= set(_container(one(KUBERNETES, "Deployment"))["resources"])


def test_scrape_annotations_name_the_metrics_endpoint() -> None:
    """Prometheus is told the REST port and the metrics path the server serves."""
    deployment = one(KUBERNETES, "Deployment")
    annotations = deployment["spec"]["template"]["metadata"]["annotations"]
    flags = parse_flags(_container(deployment)["args"])
    assert annotations == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(flags.rest_api_port),
        "prometheus.io/path": DEFAULT_METRICS_PATH,
    }


def test_service_hpa_and_pdb_select_the_deployment() -> None:
    """The Service's target ports are the container's; selectors and scale targets match."""
    deployment = one(KUBERNETES, "Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    service = one(KUBERNETES, "Service")
    assert service["spec"]["selector"].items() <= labels.items()
    named = {port["name"]: port["containerPort"] for port in _container(deployment)["ports"]}
    assert {p["targetPort"] for p in service["spec"]["ports"]} == set(named)
    pdb = one(KUBERNETES, "PodDisruptionBudget")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    hpas = [doc for _, doc in manifests(KUBERNETES) if doc["kind"] == "HorizontalPodAutoscaler"]
    assert len(hpas) == 2  # CPU, and the in-flight example
    for hpa in hpas:
        assert hpa["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
        assert hpa["spec"]["minReplicas"] > pdb["spec"]["maxUnavailable"]


def test_the_configmap_holds_a_valid_models_config(tmp_path: Path) -> None:
    """models.config in the ConfigMap parses, and the Deployment mounts it without subPath."""
    configmap = one(KUBERNETES, "ConfigMap")
    text = configmap["data"]["models.config"]
    config = read_model_server_config(str(tmp_path / "models.config"), content=text.encode())
    assert config.names == ("half_plus_two",)
    deployment = one(KUBERNETES, "Deployment")
    [mount] = [m for m in _container(deployment)["volumeMounts"] if m["name"] == "config"]
    assert "subPath" not in mount  # a subPath mount never sees ConfigMap updates
    flags = parse_flags(_container(deployment)["args"])
    assert Path(flags.model_config_file).parent == Path(mount["mountPath"])
    [volume] = [
        v for v in deployment["spec"]["template"]["spec"]["volumes"] if v["name"] == "config"
    ]
    assert volume["configMap"]["name"] == configmap["metadata"]["name"]


def test_the_inflight_example_scales_on_the_documented_gauge() -> None:
    """The in-flight HPA asks for the gauge the guide and metrics reference name."""
    [hpa] = documents(KUBERNETES / "examples" / "hpa-inflight.yaml")
    name = hpa["spec"]["metrics"][0]["pods"]["metric"]["name"]
    guide = (Path(KSERVE).parents[1] / "docs" / "guides" / "kubernetes.md").read_text()
    assert name == "servinglib_model_requests_in_flight"
    assert name in guide
