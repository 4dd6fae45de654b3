"""The testing guide shows its example code exactly as the example files (run as tests) hold it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[2] / "docs"
GUIDE = DOCS / "guides" / "testing_loaders.md"
EXAMPLES = sorted((DOCS / "examples").glob("*.py"))


def python_blocks() -> list[str]:
    return re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.DOTALL)


@pytest.mark.parametrize("block", python_blocks(), ids=lambda block: block.split("\n")[0][:40])
def test_each_code_block_is_verbatim_from_an_example_file(block: str) -> None:
    """Every python block of the guide appears, character for character, in docs/examples/."""
    assert any(block in path.read_text(encoding="utf-8") for path in EXAMPLES)


def test_the_guide_has_code_blocks() -> None:
    """The blocks are found (so the test above is not vacuous)."""
    assert len(python_blocks()) >= 10
