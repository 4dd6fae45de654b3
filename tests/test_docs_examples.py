"""The documentation's examples run as written, so the guides never rot."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "docs" / "examples"
SCRIPTS = sorted(p for p in EXAMPLES.glob("*.py") if not p.name.startswith("test_"))
SHELL_BLOCKS = "".join(
    block
    for path in EXAMPLES.parent.rglob("*.md")
    for block in re.findall(
        r"```(?:sh|bash)\n(.*?)```", path.read_text(encoding="utf-8"), re.DOTALL
    )
)
# The guides' own pytest commands run these (tests/test_docs_blocks.py): not twice.
RUN_BY_GUIDES = {
    name
    for line in SHELL_BLOCKS.splitlines()
    if "pytest" in line
    for name in re.findall(r"docs/examples/(test_\w+\.py)", line)
}
TEST_FILES = sorted(p for p in EXAMPLES.glob("test_*.py") if p.name not in RUN_BY_GUIDES)


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
