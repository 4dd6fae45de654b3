"""half_plus_two as a Python servable: y = 0.5 * x + 2, like the SavedModel's version 1.

Served by the "python" platform (which must be enabled: it runs this file).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec


class Model(PythonModel):
    """y = a * x + b with a = 0.5 and b = 2.  Thread-safe: it holds no mutable state."""

    def load(self, path: str) -> None:
        self.a = np.float32(0.5)
        self.b = np.float32(2.0)

    @signature(
        name="serving_default",
        inputs=[TensorSpec("x", np.float32, [-1])],
        outputs=[TensorSpec("y", np.float32, [-1])],
    )
    def predict(self, x: npt.NDArray[np.float32]) -> dict[str, npt.NDArray[np.float32]]:
        return {"y": self.a * x + self.b}
