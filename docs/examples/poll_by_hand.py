"""Step a FileSystemStoragePathSource by hand and print what it emits, also under faults.

Run: .venv/bin/python docs/examples/poll_by_hand.py
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

import attrs

from servinglib import ServableData
from servinglib.sources import (
    FileSystemStoragePathSource,
    FileSystemStoragePathSourceConfig,
    ServableToMonitor,
    ServableVersionPolicy,
    StoragePath,
    TargetBase,
    connect,
)


class PrintingTarget(TargetBase[StoragePath]):
    """Prints each aspired-versions set it receives as version=directory name.  Thread-safe."""

    def set_aspired_versions(
        self, servable_name: str, versions: Sequence[ServableData[StoragePath]]
    ) -> None:
        items = ", ".join(f"{v.id.version}={os.path.basename(v.data)}" for v in versions)
        print(f"  emitted {servable_name}: [{items}]")


def step(source: FileSystemStoragePathSource, root: Path, what: str) -> None:
    """Polls once and prints what was emitted and which servables have an error."""
    print(what)
    source.poll_once()
    for name, error in source.servable_errors().items():
        print(f"  error {name}: {error.code.name}: {error.message.replace(str(root), '<root>')}")


def main() -> None:
    # The source logs each problem at WARNING; this example prints them itself.
    logging.getLogger("servinglib.sources").setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        base = root / "m"
        for name in ("1", "00012", "3.tmp", "latest", "-4"):
            (base / name).mkdir(parents=True)
        (base / "5").write_text("a file, not a directory", encoding="utf-8")

        config = FileSystemStoragePathSourceConfig(
            servables=[ServableToMonitor("m", str(base), ServableVersionPolicy.all())],
            file_system_poll_wait_seconds=-1,  # never polls by itself: call poll_once()
        )
        with FileSystemStoragePathSource(config) as source:
            connect(source, PrintingTarget())
            step(source, root, "version directories are the children named by digits only:")

            base.rename(root / "m.moved")
            step(source, root, "base path missing: nothing emitted (nothing unloads):")
            (root / "m.moved").rename(base)
            step(source, root, "base path back:")

            for name in ("1", "00012"):
                shutil.rmtree(base / name)
            step(source, root, "no version directories: the empty set (everything unloads):")

            present = attrs.evolve(config, servable_versions_always_present=True)
            source.update_config(present)
            step(source, root, "same, with servable_versions_always_present:")

            marked = attrs.evolve(present, version_done_marker="DONE")
            source.update_config(marked)
            (base / "6").mkdir()
            (base / "7").mkdir()
            (base / "6" / "DONE").touch()
            step(source, root, "version_done_marker='DONE'; only 6 has it:")
            (base / "7" / "DONE").touch()
            step(source, root, "7 gets its marker:")

            print("update_config: m removed, n added (no marker, not always present):")
            (root / "n" / "1").mkdir(parents=True)
            other = ServableToMonitor("n", str(root / "n"))
            source.update_config(attrs.evolve(config, servables=[other]))
            step(source, root, "the next poll:")


if __name__ == "__main__":
    main()
