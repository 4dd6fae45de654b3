"""The docs index and the README link every guide, so a new guide is never left unlisted."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
GUIDES = sorted(path.name for path in (ROOT / "docs" / "guides").glob("*.md"))


@pytest.mark.parametrize("page", ["docs/index.md", "README.md"])
def test_every_guide_is_linked(page: str) -> None:
    """Each guide in docs/guides/ is linked from the page, and every guide linked exists."""
    linked = set(re.findall(r"guides/([\w-]+\.md)", (ROOT / page).read_text()))
    assert sorted(linked) == GUIDES
