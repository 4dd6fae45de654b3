"""A ConfigMap volume as the kubelet writes it (Kubernetes' AtomicWriter), for reload tests.

The layout and the order of every step are AtomicWriter.Write's
(pkg/volume/util/atomic_writer.go in kubernetes/kubernetes)::

    <dir>/..2026_11_24_18_30_00.123456789/models.config   the real files, one dir per update
    <dir>/..data -> ..2026_11_24_18_30_00.123456789       the one symlink an update swaps
    <dir>/models.config -> ..data/models.config           what the pod reads; never rewritten

An update: a new timestamped directory (mode 0755) with the payload
written in it (mode 0644), user-visible symlinks for new keys, a
``..data_tmp`` symlink to the new directory renamed over ``..data``
(rename(2) is atomic), stale user-visible links removed, the old
timestamped directory removed.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

DATA_DIR = "..data"
NEW_DATA_DIR = "..data_tmp"


def write_configmap(directory: Path, payload: Mapping[str, str]) -> None:
    """Projects ``payload`` (key → text) into ``directory`` exactly as the kubelet does."""
    data_link = directory / DATA_DIR
    old = os.readlink(data_link) if data_link.is_symlink() else None
    stale: set[str] = set()
    if old is not None:
        stale = set(os.listdir(directory / old)) - set(payload)
        if (
            all(
                (directory / old / key).is_file() and (directory / old / key).read_text() == text
                for key, text in payload.items()
            )
            and not stale
        ):
            return  # step 4: nothing to write
    prefix = time.strftime("..%Y_%m_%d_%H_%M_%S.", time.gmtime())
    new = Path(tempfile.mkdtemp(prefix=prefix, dir=directory))
    new.chmod(0o755)
    for key, text in payload.items():
        (new / key).write_text(text)
        (new / key).chmod(0o644)
    for key in payload:
        visible = directory / key
        if not visible.is_symlink():
            visible.symlink_to(os.path.join(DATA_DIR, key))
    os.symlink(new.name, directory / NEW_DATA_DIR)
    os.rename(directory / NEW_DATA_DIR, data_link)
    for key in stale:
        os.remove(directory / key)
    if old is not None:
        shutil.rmtree(directory / old)
