"""A Python model: doubles its input, plus a per-version offset read at load time."""

from pathlib import Path

import numpy as np
import numpy.typing as npt

from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec


class Model(PythonModel):
    def load(self, path: str) -> None:
        self.offset = float((Path(path) / "offset.txt").read_text())

    @signature(
        name="serving_default",
        inputs=[TensorSpec("x", "float32", [-1])],
        outputs=[TensorSpec("y", "float32", [-1])],
    )
    def double(self, x: npt.NDArray[np.float32]) -> dict[str, npt.NDArray[np.float32]]:
        return {"y": 2 * x + self.offset}
