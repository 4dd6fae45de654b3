"""Record warmup requests for a model version, then load it and see them replayed."""

import tempfile
from pathlib import Path

import numpy as np

from servinglib.codecs import from_numpy, write_records
from servinglib.loaders import PythonLoader
from servinglib.loaders.warmup import WARMUP_FILE
from servinglib.protos import prediction_log_pb2

MODEL_PY = """
from servinglib.loaders import PythonModel, signature
from servinglib.servable import TensorSpec

class Model(PythonModel):
    @signature(
        inputs=[TensorSpec("x", "float32", [-1])], outputs=[TensorSpec("y", "float32", [-1])]
    )
    def serving_default(self, x):
        return {"y": 2 * x}
"""


def warmup_record(batch: np.ndarray) -> bytes:
    """One PredictionLog holding a predict request, serialized (TF Serving's format)."""
    log = prediction_log_pb2.PredictionLog()
    request = log.predict_log.request
    request.model_spec.name = "doubler"
    request.model_spec.signature_name = "serving_default"
    request.inputs["x"].CopyFrom(from_numpy(batch))
    return log.SerializeToString()


with tempfile.TemporaryDirectory() as scratch:
    version = Path(scratch) / "doubler" / "1"
    version.mkdir(parents=True)
    (version / "model.py").write_text(MODEL_PY)
    # One record per batch size the model will see, so each is compiled/cached before traffic.
    records = [warmup_record(np.ones(size, np.float32)) for size in (1, 8, 32)]
    (version / "assets.extra").mkdir()
    write_records(version / WARMUP_FILE, records)

    loader = PythonLoader(str(version))
    loader.load()  # replays the 3 records before returning
    print(f"replayed {loader.warmup_records} warmup records")
    loader.unload()
