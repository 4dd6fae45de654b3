"""Reading the deployment files of deploy/ (YAML manifests, the Dockerfile) for the tests."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
KUBERNETES = ROOT / "deploy" / "kubernetes"
KSERVE = ROOT / "deploy" / "kserve"
DOCKERFILE = ROOT / "Dockerfile"
INSTALL_SCRIPT = ROOT / "deploy" / "docker" / "install-servinglib"


def documents(path: Path) -> list[dict[str, Any]]:
    """The YAML documents of ``path`` (empty ones dropped)."""
    with path.open() as file:
        return [doc for doc in yaml.safe_load_all(file) if doc]


def manifests(directory: Path) -> list[tuple[Path, dict[str, Any]]]:
    """(file, document) for every ``*.yaml`` under ``directory``, kustomizations excluded."""
    found = []
    for path in sorted(directory.rglob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        found.extend((path, doc) for doc in documents(path))
    return found


def one(directory: Path, kind: str, name: str | None = None) -> dict[str, Any]:
    """The one manifest of ``kind`` (and ``name``) directly in ``directory``."""
    matches = [
        doc
        for path, doc in manifests(directory)
        if path.parent == directory
        and doc["kind"] == kind
        and (name is None or doc["metadata"]["name"] == name)
    ]
    assert len(matches) == 1, f"{len(matches)} {kind} manifests in {directory}"
    return matches[0]


def flag_value(args: list[str], flag: str) -> str:
    """The value of ``--flag=value`` in ``args`` (AssertionError if absent)."""
    for arg in args:
        if arg.startswith(f"{flag}="):
            return arg.split("=", 1)[1]
    raise AssertionError(f"{flag} is not among {args}")


def dockerfile_stages() -> list[list[tuple[str, str]]]:
    """The Dockerfile's stages, each a list of (instruction, arguments); continuations joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    stages: list[list[tuple[str, str]]] = [[]]
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        instruction, _, rest = line.partition(" ")
        instruction = instruction.upper()
        if instruction == "FROM" and stages[-1] and any(i == "FROM" for i, _ in stages[-1]):
            stages.append([])
        stages[-1].append((instruction, rest.strip()))
    return stages


def exec_form(arguments: str) -> list[str]:
    """A JSON (exec form) ENTRYPOINT or CMD; AssertionError for the shell form."""
    value = json.loads(arguments)
    assert isinstance(value, list), f"not the exec form: {arguments}"
    return [str(item) for item in value]
