"""The repository's tracked files: nothing that only works on one machine."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def tracked_symlinks() -> list[Path]:
    """Every tracked file git stores as a symbolic link (mode 120000)."""
    listing = subprocess.run(
        ["git", "ls-files", "-s", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    return [
        ROOT / entry.split("\t", 1)[1]
        for entry in listing.split("\0")
        if entry.startswith("120000 ")
    ]


def test_no_tracked_symlink_leaves_the_tree() -> None:
    """A tracked symbolic link is relative and points inside the checkout (an absolute link to
    a maintainer's .venv was tracked once, dangling in every other clone)."""
    leaving = [
        f"{link.relative_to(ROOT)} -> {os.readlink(link)}"
        for link in tracked_symlinks()
        if os.path.isabs(os.readlink(link)) or not Path(os.path.realpath(link)).is_relative_to(ROOT)
    ]
    assert leaving == []


def test_no_install_command_names_a_package_index_servinglib_is_not_on() -> None:
    """Docs and messages say `pip install '.[extra]'` in a checkout: servinglib is on no package
    index, so a pip install of `servinglib[extra]` fails for a new user."""
    listing = subprocess.run(
        ["git", "ls-files", "*.md", "*.py", "Dockerfile", "deploy/*"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    wrong = "pip install " + "'servinglib["  # split: this file is listed too
    naming = [name for name in listing if wrong in (ROOT / name).read_text(errors="replace")]
    assert naming == []
