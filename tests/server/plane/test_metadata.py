"""Model metadata for TF Serving (SignatureDefMap) and KServe V2, from signature specs."""

from __future__ import annotations

import numpy as np
import pytest

from servinglib.servable import CLASSIFY_METHOD, SignatureSpec, TensorSpec
from servinglib.server.plane.metadata import (
    SIGNATURE_DEF_MAP_TYPE_URL,
    signature_def_map,
    v2_model_metadata,
)

SIGNATURES = {
    "serving_default": SignatureSpec(
        [TensorSpec("x", np.float32, [-1, 3], tensor_name="serving_default_x:0")],
        [TensorSpec("y", np.int64, None), TensorSpec("label", object, [-1])],
    ),
    "classify": SignatureSpec(
        [TensorSpec("inputs", object, [-1])],
        [TensorSpec("scores", np.float32, [-1, 2])],
        method_name=CLASSIFY_METHOD,
    ),
}


def test_signature_def_map_carries_names_dtypes_shapes_and_methods() -> None:
    """Every signature becomes a SignatureDef with TF DataTypes, dims and the method name."""
    result = signature_def_map(SIGNATURES)
    default = result.signature_def["serving_default"]
    assert default.method_name == "tensorflow/serving/predict"
    x = default.inputs["x"]
    assert (x.name, x.dtype) == ("serving_default_x:0", 1)  # DT_FLOAT
    assert [d.size for d in x.tensor_shape.dim] == [-1, 3]
    assert default.outputs["y"].tensor_shape.unknown_rank
    assert default.outputs["label"].dtype == 7  # DT_STRING
    assert result.signature_def["classify"].method_name == CLASSIFY_METHOD


def test_official_clients_unpack_it_from_an_any() -> None:
    """Packed under TF Serving's type URL, the official SignatureDefMap class unpacks it."""
    official = pytest.importorskip("tensorflow_serving.apis.get_model_metadata_pb2")
    from google.protobuf import any_pb2

    packed = any_pb2.Any(
        type_url=SIGNATURE_DEF_MAP_TYPE_URL,
        value=signature_def_map(SIGNATURES).SerializeToString(),
    )
    unpacked = official.SignatureDefMap()
    assert packed.Unpack(unpacked)
    assert unpacked.signature_def["serving_default"].inputs["x"].name == "serving_default_x:0"


def test_v2_metadata_lists_the_default_signature() -> None:
    """V2 metadata names datatypes the V2 way and uses serving_default's tensors."""
    metadata = v2_model_metadata("m", [2, 1], "tensorflow", SIGNATURES)
    assert metadata == {
        "name": "m",
        "versions": ["1", "2"],
        "platform": "tensorflow",
        "inputs": [{"name": "x", "datatype": "FP32", "shape": [-1, 3]}],
        "outputs": [
            {"name": "y", "datatype": "INT64", "shape": [-1]},
            {"name": "label", "datatype": "BYTES", "shape": [-1]},
        ],
    }


def test_v2_metadata_of_a_single_signature_servable_uses_it() -> None:
    """A servable with one signature, whatever its name, describes that one."""
    metadata = v2_model_metadata("m", [1], "python", {"classify": SIGNATURES["classify"]})
    assert [t["name"] for t in metadata["inputs"]] == ["inputs"]


def test_matches_the_saved_models_own_signature_defs() -> None:
    """For the shipped half_plus_two, our SignatureDefMap equals the SavedModel's signature_def."""
    pytest.importorskip("tensorflow")
    import os

    from tensorflow.core.protobuf import saved_model_pb2

    from servinglib.examples import HALF_PLUS_TWO
    from servinglib.loaders.tensorflow import SavedModelLoader

    path = os.path.join(HALF_PLUS_TWO, "1")
    loader = SavedModelLoader(path)
    loader.load()
    try:
        ours = signature_def_map(loader.servable().signatures)
    finally:
        loader.unload()
    with open(os.path.join(path, "saved_model.pb"), "rb") as file:
        saved_model = saved_model_pb2.SavedModel.FromString(file.read())
    theirs = saved_model.meta_graphs[0].signature_def
    served = {k: v for k, v in theirs.items() if k != "__saved_model_init_op"}
    assert set(ours.signature_def) == set(served)
    for name, signature in served.items():
        assert ours.signature_def[name].SerializeToString(
            deterministic=True
        ) == signature.SerializeToString(deterministic=True), name
