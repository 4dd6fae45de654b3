"""Unit-test a Python model: load its version directory with PythonLoader and call it."""

from pathlib import Path

import numpy as np

from servinglib.loaders import PythonLoader
from servinglib.servable import call_signature

VERSION_DIR = Path(__file__).parent / "models" / "python_doubler" / "1"


def test_doubler_doubles_and_adds_its_offset() -> None:
    """Version 1 computes 2·x + 0.5 (its offset.txt)."""
    loader = PythonLoader(str(VERSION_DIR))
    loader.load()
    try:
        outputs = call_signature(loader.servable(), None, {"x": np.array([1.0], np.float32)})
    finally:
        loader.unload()
    assert outputs["y"].tolist() == [2.5]
