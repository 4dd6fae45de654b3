"""Regenerates servinglib's protobuf modules from the .proto files beside this script.

Run ``python -m servinglib.protos.generate`` after editing a .proto file and commit the
``*_pb2.py`` and ``*_pb2.pyi`` files it rewrites; ``tests/protos/test_generated.py`` fails when
they are stale or edited by hand.

The generated code depends on the protoc inside grpcio-tools: 1.81.x (protoc 33.5) emits gencode
for protobuf 6.33.5, which is the protobuf floor in pyproject.toml. A newer grpcio-tools would
raise that floor (1.85 emits protobuf-7 gencode), so this script refuses any other minor version.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from servinglib._install import install_hint

# The repository root: .proto files are compiled with `-I ROOT` under their paths below it, so
# that the generated modules import each other as `servinglib.protos.<name>_pb2`.
ROOT = Path(__file__).resolve().parents[2]
PROTO_DIR = Path(__file__).resolve().parent
REQUIRED_GRPCIO_TOOLS = "1.81."


def proto_files() -> list[Path]:
    """The .proto files to compile, sorted by name."""
    return sorted(PROTO_DIR.glob("*.proto"))


def generate(out_dir: Path) -> list[Path]:
    """Compiles every .proto file into ``out_dir``; returns the files written, sorted.

    The modules land under ``out_dir/servinglib/protos/``, as they do under the repository root.
    Requires: grpcio-tools 1.81.x (raises RuntimeError otherwise, or if protoc fails).
    """
    try:
        version = importlib.metadata.version("grpcio-tools")
    except importlib.metadata.PackageNotFoundError:
        raise RuntimeError(f"grpcio-tools is not installed ({install_hint('test')})") from None
    if not version.startswith(REQUIRED_GRPCIO_TOOLS):
        raise RuntimeError(
            f"grpcio-tools {version} is installed; servinglib's protos are generated with "
            f"{REQUIRED_GRPCIO_TOOLS}x (gencode for protobuf 6.33.5)"
        )
    sources = [str(path.relative_to(ROOT)) for path in proto_files()]
    with tempfile.TemporaryDirectory() as scratch:
        # protoc writes into an existing directory only; write to a scratch one, then copy the
        # files, so a failed run leaves out_dir untouched.  It runs in a child process: in a
        # process that has loaded TensorFlow, whose own protobuf C++ clashes with protoc's, the
        # in-process grpc_tools.protoc.main() crashes with a segmentation fault.  The module's
        # entry point adds the include path of protobuf's well-known types (wrappers, any).
        args = [
            sys.executable,
            "-m",
            "grpc_tools.protoc",
            f"-I{ROOT}",
            f"--python_out={scratch}",
            f"--pyi_out={scratch}",
            *sources,
        ]
        completed = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, check=False)
        if completed.returncode != 0:
            raise RuntimeError(
                f"protoc failed with exit status {completed.returncode}: {completed.stderr}"
            )
        written = []
        for produced in sorted(Path(scratch).rglob("*_pb2.py*")):
            target = out_dir / produced.relative_to(scratch)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(produced.read_bytes())
            written.append(target)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: regenerate into the repository root (or into the one directory given)."""
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) > 1:
        print("usage: python -m servinglib.protos.generate [OUT_DIR]", file=sys.stderr)
        return 2
    out_dir = Path(args[0]) if args else ROOT
    for path in generate(out_dir):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
