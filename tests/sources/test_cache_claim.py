"""CacheClaim: one claimant per model cache directory, the others in private directories."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from servinglib.sources.cache_claim import CLAIM_FILE, CacheClaim


def test_a_second_claim_gets_a_private_directory_removed_on_release(tmp_path: Path) -> None:
    """The shared directory goes to the first claim; the second works beside it until released."""
    shared = str(tmp_path / "m-1234")
    first, second = CacheClaim(shared), CacheClaim(shared)
    assert (first.directory, first.private) == (shared, False)
    assert second.private
    assert Path(second.directory).parent == tmp_path
    second.release()
    assert not Path(second.directory).exists()
    first.release()
    assert Path(shared).is_dir()  # kept for the next start
    again = CacheClaim(shared)
    assert (again.directory, again.private) == (shared, False)
    again.release()


def test_a_private_directory_left_by_a_killed_server_is_removed_by_the_next_shared_claim(
    tmp_path: Path,
) -> None:
    """A private directory whose process was killed goes when the shared one is claimed next;
    one still held stays."""
    shared = str(tmp_path / "m-1234")
    first, held = CacheClaim(shared), CacheClaim(shared)
    killed = subprocess.run(
        [sys.executable, "-c", _CLAIM_AND_DIE, shared],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    left = Path(killed.stdout.strip())
    assert (left / "1").is_dir()
    first.release()
    claim = CacheClaim(shared)
    assert not claim.private
    assert not left.exists()
    assert (Path(held.directory) / CLAIM_FILE).exists()
    held.release()
    claim.release()


_CLAIM_AND_DIE = """
import os, signal, sys
from servinglib.sources.cache_claim import CacheClaim
claim = CacheClaim(sys.argv[1])
os.mkdir(os.path.join(claim.directory, "1"))
print(claim.directory, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
