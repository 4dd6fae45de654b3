"""Tests that importing servinglib stays light, and that servinglib.core imports no heavy stacks."""

from __future__ import annotations

import ast
import functools
import json
import subprocess
import sys
from pathlib import Path

import pytest

import servinglib

PACKAGE_DIR = Path(servinglib.__file__).parent
CORE_DIR = PACKAGE_DIR / "core"
PUBLIC_MODULES = ["servinglib", "servinglib.core", "servinglib.testing"]
# What `import servinglib` must not drag in (DESIGN §6): optional or front-end-only stacks.
HEAVY_MODULES = ["tensorflow", "grpc", "google.protobuf", "uvicorn", "watchdog"]
IMPORT_BUDGET_S = 0.5
RUNS = 5
SUBPROCESS_TIMEOUT_S = 60.0

# Runs in a fresh interpreter: times one import, then lists the heavy modules it loaded.
PROBE = """
import json, sys, time
started = time.perf_counter()
import {module}
elapsed_s = time.perf_counter() - started
heavy = {heavy!r}
loaded = sorted(m for m in sys.modules if any(m == h or m.startswith(h + ".") for h in heavy))
print(json.dumps({{"elapsed_s": elapsed_s, "loaded": loaded, "file": {module}.__file__}}))
"""


@functools.cache
def probe(module: str) -> tuple[dict[str, object], ...]:
    """Imports ``module`` in ``RUNS`` fresh interpreters; what each measured and saw loaded."""
    results = []
    for _ in range(RUNS):
        completed = subprocess.run(
            [sys.executable, "-c", PROBE.format(module=module, heavy=HEAVY_MODULES)],
            cwd=PACKAGE_DIR.parent,
            capture_output=True,
            text=True,
            timeout=SUBPROCESS_TIMEOUT_S,
            check=False,
        )
        assert completed.returncode == 0, completed.stderr
        results.append(json.loads(completed.stdout))
    return tuple(results)


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_subprocess_imports_this_checkout(module: str) -> None:
    """The probe imports the servinglib under test, not some other installed copy."""
    for result in probe(module):
        assert Path(str(result["file"])).is_relative_to(PACKAGE_DIR)


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_import_loads_no_heavy_dependency(module: str) -> None:
    """Importing a public module loads neither TensorFlow, grpc, protobuf, uvicorn nor watchdog."""
    for result in probe(module):
        assert result["loaded"] == []


@pytest.mark.parametrize("module", PUBLIC_MODULES)
def test_import_is_fast(module: str) -> None:
    """Importing a public module in a fresh interpreter takes under 0.5 s (best of 5 runs)."""
    fastest_s = min(float(str(result["elapsed_s"])) for result in probe(module))

    assert fastest_s < IMPORT_BUDGET_S


# -- static checks of servinglib.core ----------------------------------------------------

# Top-level packages core may import besides its own package (DESIGN §2 import rules).
CORE_ALLOWED_THIRD_PARTY = {"attrs", "numpy"}
CORE_ALLOWED_OWN = ("servinglib.core", "servinglib.errors")


def imported_modules(source: str, package: str) -> set[str]:
    """Every module ``source`` imports, at any depth (also inside functions and classes).

    Relative imports are resolved against ``package``; ``importlib.import_module`` and
    ``__import__`` calls with a literal name count too.
    """
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                found.add(f"{base}.{node.module}" if node.module else base)
            elif node.module is not None:
                found.add(node.module)
        elif isinstance(node, ast.Call) and _is_dynamic_import(node.func) and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                found.add(first.value)
    return found


def _is_dynamic_import(func: ast.expr) -> bool:
    if isinstance(func, ast.Name):
        return func.id in {"__import__", "import_module"}
    return isinstance(func, ast.Attribute) and func.attr == "import_module"


def core_files() -> list[Path]:
    return sorted(CORE_DIR.rglob("*.py"))


def core_imports() -> dict[str, set[str]]:
    """Modules imported by each file under servinglib/core/, by path relative to the package."""
    imports = {}
    for path in core_files():
        package = "servinglib." + ".".join(path.parent.relative_to(PACKAGE_DIR).parts)
        relative = str(path.relative_to(PACKAGE_DIR.parent))
        imports[relative] = imported_modules(path.read_text(encoding="utf-8"), package)
    return imports


def _is_within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def test_import_finder_sees_imports_inside_functions() -> None:
    """The static finder reports imports at any depth, relative ones and import_module calls."""
    source = """
import os
from . import clock
from ..errors import ServingError
def load():
    import tensorflow as tf
    from grpc import aio
class Lazy:
    def get(self):
        return importlib.import_module("uvicorn")
"""

    found = imported_modules(source, "servinglib.core")

    assert found == {
        "os",
        "servinglib.core",
        "servinglib.errors",
        "tensorflow",
        "grpc",
        "uvicorn",
    }


def test_core_has_modules_to_check() -> None:
    """The static checks see servinglib/core/'s files (so they cannot pass vacuously)."""
    assert len(core_files()) >= 10


@pytest.mark.parametrize("forbidden", ["tensorflow", "grpc"])
def test_core_never_imports_tensorflow_or_grpc(forbidden: str) -> None:
    """No file under servinglib/core/ imports TensorFlow or grpc, not even inside a function."""
    offenders = {
        path: sorted(m for m in modules if _is_within(m, forbidden))
        for path, modules in core_imports().items()
        if any(_is_within(m, forbidden) for m in modules)
    }

    assert offenders == {}


def test_core_imports_only_stdlib_attrs_numpy_and_errors() -> None:
    """servinglib/core/ imports only the standard library, attrs, numpy, itself and errors."""

    def allowed(module: str) -> bool:
        top = module.partition(".")[0]
        if top == "servinglib":
            return any(_is_within(module, own) for own in CORE_ALLOWED_OWN)
        return (
            top in sys.stdlib_module_names or top in CORE_ALLOWED_THIRD_PARTY or top == "__future__"
        )

    offenders = {
        path: sorted(m for m in modules if not allowed(m))
        for path, modules in core_imports().items()
        if not all(allowed(m) for m in modules)
    }

    assert offenders == {}
