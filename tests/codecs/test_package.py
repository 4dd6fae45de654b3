"""Tests for the servinglib.codecs package: its exports, and that it needs no TensorFlow."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import servinglib.codecs

SUBPROCESS_TIMEOUT_S = 60.0
# Decodes a TensorProto, an Example and a TFRecord file in a fresh interpreter.
PROBE = """
import json, sys, tempfile, os
import numpy as np
from servinglib import codecs
codecs.to_numpy(codecs.from_numpy(np.arange(3.0)))
codecs.features_of(codecs.make_example({"x": [1.0]}))
path = os.path.join(tempfile.mkdtemp(), "r.tfrecord")
codecs.write_records(path, [b"a"])
assert list(codecs.read_records(path)) == [b"a"]
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("tensorflow", "grpc"))))
"""


def test_all_is_sorted_and_resolves() -> None:
    """__all__ is sorted, unique, and every name in it is an attribute of the package."""
    names = list(servinglib.codecs.__all__)

    assert names == sorted(set(names))
    assert all(hasattr(servinglib.codecs, name) for name in names)


def test_codecs_work_without_importing_tensorflow_or_grpc() -> None:
    """Encoding and decoding tensors, examples and TFRecords loads neither TensorFlow nor grpc."""
    completed = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=Path(servinglib.codecs.__file__).parents[2],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
        check=False,
    )

    assert completed.returncode == 0, completed.stderr
    assert json.loads(completed.stdout) == []
