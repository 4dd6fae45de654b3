"""Which object keys may become files of a version's copy, and where."""

from __future__ import annotations

from pathlib import Path

import pytest

from servinglib.sources.remote_keys import local_targets, shown_key, unsafe_key_reason


def test_plain_keys_become_files_under_the_directory(tmp_path: Path) -> None:
    """Keys of plain names map to the same path under the directory."""
    keys = ["saved_model.pb", "variables/variables.index", "assets/a b/ünï.txt"]
    assert all(unsafe_key_reason(key) is None for key in keys)
    assert local_targets(str(tmp_path), keys) == {key: str(tmp_path / key) for key in keys}


def test_a_parent_resolving_outside_is_refused(tmp_path: Path) -> None:
    """A parent directory that is a link out of the directory fails the last check."""
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "link").symlink_to(tmp_path)
    with pytest.raises(ValueError, match="'link/x' resolves outside"):
        local_targets(str(tmp_path / "copy"), ["ok", "link/x"])


def test_a_long_key_is_shown_cut_and_without_line_breaks() -> None:
    """A megabyte key with CR/LF is quoted in 200 characters plus its length, on one line."""
    key = "a\r\n" + "b" * 1_000_000
    shown = shown_key(key)
    assert "\n" not in shown
    assert "\r" not in shown
    assert len(shown) < 250
    assert shown.endswith("(1000003 characters)")
