"""Example models shipped with servinglib, for trying a server out and for tests.

``half_plus_two`` is a TensorFlow SavedModel (platform "tensorflow") with
versions 1 (y = 0.5·x + 2) and 2 (y = 0.5·x + 3, with a warmup file), and
``python_half_plus_two`` the same as a Python servable (platform "python",
version 1).  ``scripts/make_example_models.py`` in the source tree
regenerates the SavedModels.
"""

import os

MODELS_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models")
"""The directory holding one base path per example model."""
HALF_PLUS_TWO = os.path.join(MODELS_DIR, "half_plus_two")
"""Base path of the half_plus_two SavedModel (versions 1 and 2)."""
PYTHON_HALF_PLUS_TWO = os.path.join(MODELS_DIR, "python_half_plus_two")
"""Base path of the half_plus_two Python servable (version 1)."""

__all__ = ["HALF_PLUS_TWO", "MODELS_DIR", "PYTHON_HALF_PLUS_TWO"]
