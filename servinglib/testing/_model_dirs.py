"""make_version_dirs and write_python_model: model base paths with numbered version directories,
written safely."""

from __future__ import annotations

import os
import shutil
import textwrap
import uuid
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path, PurePosixPath

Files = Mapping[str, bytes | str]
"""Relative path (``/``-separated, subdirectories allowed) → content (str is written UTF-8)."""


def make_version_dirs(
    base: str | os.PathLike[str],
    name: str,
    versions: Iterable[int],
    files: Files | Callable[[int], Files] | None = None,
) -> Path:
    """Creates ``base/name/<version>/`` for each version, holding ``files``; returns ``base/name``.

    ``files`` is the same for every version, or ``files(version)`` per
    version; None creates empty version directories.  Each version is
    written into a directory beside it whose name is not a number (so no
    source takes it for a version) and then renamed into place, so a
    file-system source watching ``base/name`` never sees a half-written
    version.  Raises FileExistsError if a version directory exists, and
    ValueError for a bad version or a file path that is absolute or leaves
    its version directory.
    Thread safety: safe for different versions; one version from two
    threads at once makes one of them raise FileExistsError.
    """
    model_dir = Path(base) / name
    model_dir.mkdir(parents=True, exist_ok=True)
    for version in versions:
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise ValueError(f"a version is an int >= 0, got {version!r}")
        content = files(version) if callable(files) else files
        _publish(model_dir, version, content if content is not None else {})
    return model_dir


def write_python_model(
    base: str | os.PathLike[str],
    name: str,
    source: str,
    *,
    version: int = 1,
    files: Files | None = None,
) -> Path:
    """Writes ``source`` as ``base/name/<version>/model.py`` beside ``files``; returns base/name.

    A version of the python platform's default layout (``source``, dedented first, defines
    its ``Model``), written and raising as :func:`make_version_dirs` writes a version.
    Thread safety: as make_version_dirs.
    """
    model_files = {**(files or {}), "model.py": textwrap.dedent(source)}
    return make_version_dirs(base, name, [version], model_files)


def _publish(model_dir: Path, version: int, files: Files) -> None:
    final = model_dir / str(version)
    if final.exists():
        raise FileExistsError(f"version directory {final} already exists")
    staging = model_dir / f".{version}.tmp-{uuid.uuid4().hex}"
    staging.mkdir()
    try:
        for relative, content in files.items():
            target = staging.joinpath(*_parts(relative))
            target.parent.mkdir(parents=True, exist_ok=True)
            data = content.encode("utf-8") if isinstance(content, str) else content
            target.write_bytes(data)
        # Atomic: a watching source sees the version whole or not at all.
        os.rename(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def _parts(relative: str) -> tuple[str, ...]:
    path = PurePosixPath(relative)
    if path.is_absolute() or not path.parts or ".." in path.parts:
        raise ValueError(f"file paths are relative and stay in the version directory: {relative!r}")
    return path.parts
