"""install_hint: how to install an optional part of servinglib, in the one form that works."""

from __future__ import annotations


def install_hint(extra: str) -> str:
    """The command that installs the extra ``extra``, e.g. ``pip install '.[s3]'``."""
    return f"pip install '.[{extra}]' in a servinglib checkout"
