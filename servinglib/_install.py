"""install_hint: how to install an optional part of servinglib, in the one form that works.

servinglib is not published on a package index, so ``pip install
'servinglib[s3]'`` finds nothing; every message and guide names the
command that does: pip on a checkout of this repository.
"""

from __future__ import annotations


def install_hint(extra: str) -> str:
    """The command that installs the extra ``extra``, e.g. ``pip install '.[s3]'``."""
    return f"pip install '.[{extra}]' in a servinglib checkout"
