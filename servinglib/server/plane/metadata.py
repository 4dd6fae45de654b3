"""Model metadata in both protocols' shapes, built from a servable's signature specs."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from servinglib.servable import DEFAULT_SIGNATURE, SignatureSpec, TensorSpec

if TYPE_CHECKING:
    from servinglib.protos import get_model_metadata_pb2, meta_graph_pb2

SIGNATURE_DEF_MAP_TYPE_URL = "type.googleapis.com/tensorflow.serving.SignatureDefMap"
"""The ``Any`` type URL TF Serving's clients unpack GetModelMetadata's ``signature_def`` with."""


def signature_def_map(
    signatures: Mapping[str, SignatureSpec],
) -> get_model_metadata_pb2.SignatureDefMap:
    """TF Serving's ``SignatureDefMap`` of a servable (GetModelMetadata, REST ``/metadata``).

    Each TensorInfo carries the tensor's model-internal name, dtype and
    shape (-1 for unknown dimensions, ``unknown_rank`` when the rank is
    unknown).
    """
    from servinglib.protos import get_model_metadata_pb2

    result = get_model_metadata_pb2.SignatureDefMap()
    for name, spec in signatures.items():
        signature = result.signature_def[name]
        signature.method_name = spec.method_name
        for key, tensor in spec.inputs.items():
            _fill_tensor_info(signature.inputs[key], tensor)
        for key, tensor in spec.outputs.items():
            _fill_tensor_info(signature.outputs[key], tensor)
    return result


def _fill_tensor_info(info: meta_graph_pb2.TensorInfo, tensor: TensorSpec) -> None:
    from servinglib.codecs.dtypes import numpy_to_data_type

    info.name = tensor.tensor_name
    info.dtype = numpy_to_data_type(tensor.dtype)
    if tensor.shape is None:
        info.tensor_shape.unknown_rank = True
        return
    for size in tensor.shape:
        info.tensor_shape.dim.add().size = size


def v2_model_metadata(
    name: str,
    versions: Iterable[int],
    platform: str,
    signatures: Mapping[str, SignatureSpec],
    signature_name: str = DEFAULT_SIGNATURE,
) -> dict[str, Any]:
    """KServe V2 (Open Inference Protocol) model metadata, as its JSON object.

    V2 has one flat list of inputs and outputs: they are those of
    ``signature_name`` (``serving_default``; a servable with a single
    signature uses it whatever its name).  Shapes use -1 for unknown sizes;
    an unknown rank is reported as ``[-1]``.
    """
    spec = _described(signatures, signature_name)
    return {
        "name": name,
        "versions": [str(v) for v in sorted(versions)],
        "platform": platform,
        "inputs": [_v2_tensor(t) for t in spec.inputs.values()] if spec is not None else [],
        "outputs": [_v2_tensor(t) for t in spec.outputs.values()] if spec is not None else [],
    }


def v2_config_data_type(datatype: str) -> str:
    """Triton's model-config data type of a V2 ``datatype`` (``FP32`` → ``TYPE_FP32``)."""
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"


def _v2_tensor(tensor: TensorSpec) -> dict[str, Any]:
    from servinglib.codecs.dtypes import numpy_to_v2_datatype

    return {
        "name": tensor.name,
        "datatype": numpy_to_v2_datatype(tensor.dtype),
        "shape": list(tensor.shape) if tensor.shape is not None else [-1],
    }


def v2_decoupled(
    signatures: Mapping[str, SignatureSpec], signature_name: str = DEFAULT_SIGNATURE
) -> bool:
    """Whether the signature V2 metadata describes streams: Triton's "decoupled" model."""
    spec = _described(signatures, signature_name)
    return spec is not None and spec.streaming


def _described(
    signatures: Mapping[str, SignatureSpec], signature_name: str
) -> SignatureSpec | None:
    """The signature V2 describes: ``signature_name``, or a servable's only signature."""
    spec = signatures.get(signature_name)
    if spec is None and len(signatures) == 1:
        (spec,) = signatures.values()
    return spec
