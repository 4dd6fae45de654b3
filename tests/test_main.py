"""``python -m servinglib`` (the README's serve command) serves the bundled examples."""

from __future__ import annotations

import subprocess
import sys


def test_serves_and_calls_the_bundled_examples() -> None:
    """It loads both bundled models, prints their answers and exits 0."""
    done = subprocess.run(
        [sys.executable, "-m", "servinglib"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (
        "half_plus_two (version 2: AVAILABLE): x=[1.0, 2.0, 5.0] -> y=[3.5, 4.0, 5.5]"
        in done.stdout
    )
    assert "python_half_plus_two (version 1: AVAILABLE)" in done.stdout
    assert "ready: True" in done.stdout
