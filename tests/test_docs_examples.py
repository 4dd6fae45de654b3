"""The documentation's examples run as written, so the guides never rot."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "docs" / "examples"
SCRIPTS = sorted(p for p in EXAMPLES.glob("*.py") if not p.name.startswith("test_"))
TEST_FILES = sorted(EXAMPLES.glob("test_*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=[p.name for p in SCRIPTS])
def test_example_script_runs(script: Path) -> None:
    """Each example script exits 0 on its own within the timeout."""
    done = subprocess.run(
        [sys.executable, str(script)],
        cwd=EXAMPLES,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("test_file", TEST_FILES, ids=[p.name for p in TEST_FILES])
def test_example_tests_pass(test_file: Path) -> None:
    """Each example test file passes under pytest, as a user would run it."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
        cwd=EXAMPLES,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_there_are_examples() -> None:
    """The examples folder is found (so the tests above are not vacuous)."""
    assert SCRIPTS
    assert TEST_FILES
