"""``python -m servinglib`` is the servinglib-server command."""

from __future__ import annotations

import subprocess
import sys

import servinglib


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "servinglib", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_version_prints_the_versions() -> None:
    """--version prints servinglib's version and exits 0."""
    done = run("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"servinglib-server: servinglib {servinglib.__version__}, ")


def test_without_models_it_refuses_to_start() -> None:
    """Without --demo or model flags the server refuses to start, as TF Serving does."""
    done = run("--port=0")
    assert done.returncode == 2
    assert "No models to serve" in done.stderr


def test_a_mistyped_flag_is_one_line_with_a_suggestion() -> None:
    """A mistyped flag exits 2 with one line: the error, the closest flag, and --help."""
    done = run("--model_base_pth=/models/m")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "servinglib-server: error: unknown flag --model_base_pth (did you mean "
        "--model_base_path?); see servinglib-server --help"
    ]
