"""Tests that servinglib/protos' generated modules are current, complete and light to import."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from servinglib.protos import generate

PROTO_DIR = generate.PROTO_DIR
# The protobuf floor in pyproject.toml: the gencode version grpcio-tools 1.81.x stamps.
GENCODE_VERSION = "6.33.5"
SUBPROCESS_TIMEOUT_S = 60.0


def module_names() -> list[str]:
    """The generated modules' names, one per .proto file, sorted."""
    return [f"servinglib.protos.{path.stem}_pb2" for path in generate.proto_files()]


def committed_files() -> dict[str, bytes]:
    """The committed generated files, by name."""
    return {path.name: path.read_bytes() for path in sorted(PROTO_DIR.glob("*_pb2.py*"))}


def import_in_subprocess(statement: str) -> list[str]:
    """Runs ``statement`` in a fresh interpreter; the heavy modules it loaded, sorted."""
    probe = (
        f"import json, sys\n{statement}\n"
        "heavy = ('google.protobuf', 'tensorflow', 'grpc')\n"
        "print(json.dumps(sorted(m for m in sys.modules"
        " if any(m == h or m.startswith(h + '.') for h in heavy))))"
    )
    completed = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=generate.ROOT,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        check=False,
    )
    assert completed.returncode == 0, completed.stderr
    loaded: list[str] = json.loads(completed.stdout)
    return loaded


def test_there_are_protos_to_generate() -> None:
    """The generator sees the .proto files (so the checks below cannot pass vacuously)."""
    assert {path.name for path in generate.proto_files()} >= {
        "tensor.proto",
        "example.proto",
        "predict.proto",
        "prediction_log.proto",
        "get_model_metadata.proto",
    }


def test_committed_code_is_what_the_generator_writes(tmp_path: Path) -> None:
    """Regenerating gives byte for byte the committed *_pb2.py and *_pb2.pyi files."""
    written = generate.generate(tmp_path)

    regenerated = {path.name: path.read_bytes() for path in written}
    assert all(path.parent == tmp_path / "servinglib" / "protos" for path in written)
    assert sorted(regenerated) == sorted(committed_files())
    stale = sorted(name for name, data in regenerated.items() if committed_files()[name] != data)
    assert stale == [], "run `python -m servinglib.protos.generate` and commit the result"


def test_every_proto_has_a_module_and_a_stub() -> None:
    """Each .proto file has exactly one committed *_pb2.py and *_pb2.pyi, and nothing else does."""
    expected = sorted(
        f"{path.stem}_pb2{suffix}" for path in generate.proto_files() for suffix in (".py", ".pyi")
    )

    assert sorted(committed_files()) == expected


@pytest.mark.parametrize("name", [name for name in committed_files() if name.endswith(".py")])
def test_gencode_targets_the_protobuf_floor(name: str) -> None:
    """Every module is stamped with gencode 6.33.5, the protobuf floor of pyproject.toml."""
    text = (PROTO_DIR / name).read_text(encoding="utf-8")

    assert f"# Protobuf Python Version: {GENCODE_VERSION}\n" in text
    pyproject = tomllib.loads((generate.ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert f"protobuf>={GENCODE_VERSION},<8" in pyproject["project"]["dependencies"]


def test_generator_refuses_another_grpcio_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    """The generator fails, naming both versions, when grpcio-tools is not 1.81.x."""
    monkeypatch.setattr(generate.importlib.metadata, "version", lambda _name: "1.85.1")

    with pytest.raises(RuntimeError, match=r"1\.85\.1.*1\.81\.x"):
        generate.generate(Path("unused"))


def test_mypy_override_lists_every_generated_module() -> None:
    """pyproject.toml's mypy override for protoc's stubs names exactly the generated modules."""
    pyproject = tomllib.loads((generate.ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    overrides = [
        override
        for override in pyproject["tool"]["mypy"]["overrides"]
        if "servinglib.protos.tensor_pb2" in override["module"]
    ]

    assert len(overrides) == 1
    assert overrides[0]["module"] == module_names()


def test_protos_package_imports_no_protobuf() -> None:
    """Importing servinglib.protos itself imports neither protobuf nor any generated module."""
    loaded = import_in_subprocess(
        "import servinglib.protos\n"
        "assert not any(m.endswith('_pb2') for m in sys.modules if m.startswith('servinglib'))"
    )

    assert loaded == []


def test_generated_modules_import_without_tensorflow_or_grpc() -> None:
    """All generated modules import together with protobuf alone: no TensorFlow, no grpc."""
    loaded = import_in_subprocess("\n".join(f"import {name}" for name in module_names()))

    assert "google.protobuf" in loaded
    assert [m for m in loaded if not m.startswith("google.protobuf")] == []
