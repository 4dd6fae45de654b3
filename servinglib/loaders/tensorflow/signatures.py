"""A SavedModel's signatures as SignatureSpecs, read from its own ``saved_model.pb``."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from servinglib.errors import (
    DataLossError,
    InvalidArgumentError,
    NotFoundError,
    PermissionDeniedError,
    UnavailableError,
)
from servinglib.loaders.tensorflow._runtime import tensorflow
from servinglib.servable import SignatureSpec, TensorSpec

_log = logging.getLogger(__name__)

SAVED_MODEL_PB = "saved_model.pb"
SAVED_MODEL_PBTXT = "saved_model.pbtxt"
INIT_OP_SIGNATURE = "__saved_model_init_op"
"""Not a signature but where TF 2 keeps the model's initializer; never served."""
VARIABLES_INDEX = os.path.join("variables", "variables.index")
_SHARD = re.compile(r"variables\.data-[0-9]{5}-of-([0-9]{5})")


def read_meta_graph(path: str, tags: Iterable[str]) -> Any:  # noqa: ANN401 - a MetaGraphDef
    """The MetaGraphDef of the SavedModel in ``path`` whose tag set is ``tags``.

    Raises DataLossError when ``saved_model.pb`` (or ``.pbtxt``) is missing or
    cannot be parsed, or when the meta graph has variables but the
    ``variables`` files are missing; InvalidArgumentError naming the tag sets
    there are when none is ``tags``.
    """
    saved_model = _read_saved_model(path)
    if not saved_model.meta_graphs:
        raise DataLossError(f"The SavedModel in {path} holds no MetaGraph: is it truncated?")
    wanted = frozenset(tags)
    for meta_graph in saved_model.meta_graphs:
        if frozenset(meta_graph.meta_info_def.tags) == wanted:
            _check_variables(path, meta_graph)
            return meta_graph
    available = "; ".join(
        "{" + ", ".join(sorted(mg.meta_info_def.tags)) + "}" for mg in saved_model.meta_graphs
    )
    raise InvalidArgumentError(
        f"The SavedModel in {path} has no MetaGraph with tags {{{', '.join(sorted(wanted))}}}; "
        f"its tag sets are: {available or 'none'} (set saved_model_tags to one of them)"
    )


def signature_specs(meta_graph: Any) -> dict[str, SignatureSpec]:  # noqa: ANN401 - a MetaGraphDef
    """Every servable signature of ``meta_graph``, keyed like its ``signature_def`` map.

    TF's init-op entry is no signature and is left out; signatures with
    tensors numpy cannot carry (sparse, resource or variant tensors) are
    skipped with a warning.  (TF 2 saves ragged inputs as dense components.)
    """
    specs: dict[str, SignatureSpec] = {}
    for name, signature_def in sorted(meta_graph.signature_def.items()):
        if name == INIT_OP_SIGNATURE:
            continue
        try:
            specs[name] = SignatureSpec(
                inputs=_tensor_specs(signature_def.inputs),
                outputs=_tensor_specs(signature_def.outputs),
                method_name=signature_def.method_name,
            )
        except _UnsupportedTensorError as unsupported:
            _log.warning("signature '%s' cannot be served and is skipped: %s", name, unsupported)
    return specs


class _UnsupportedTensorError(Exception):
    pass


def _read_saved_model(path: str) -> Any:  # noqa: ANN401 - a SavedModel proto
    tensorflow()  # sets TF's environment defaults before any TF module loads
    from google.protobuf import message, text_format
    from tensorflow.core.protobuf import saved_model_pb2

    saved_model = saved_model_pb2.SavedModel()
    binary = os.path.join(path, SAVED_MODEL_PB)
    text = os.path.join(path, SAVED_MODEL_PBTXT)
    try:
        if os.path.exists(binary):
            with open(binary, "rb") as file:
                saved_model.ParseFromString(file.read())
            return saved_model
        if os.path.exists(text):
            with open(text, encoding="utf-8") as file:
                text_format.Parse(file.read(), saved_model)
            return saved_model
    except (message.DecodeError, text_format.ParseError, UnicodeDecodeError) as exc:
        found = binary if os.path.exists(binary) else text
        raise DataLossError(f"{found} is corrupt: it is not a SavedModel proto ({exc})") from exc
    except PermissionError as exc:
        raise PermissionDeniedError(f"Cannot read the SavedModel in {path}: {exc}") from exc
    except OSError as exc:  # e.g. storage briefly unreachable: worth a retry
        raise UnavailableError(f"Cannot read the SavedModel in {path}: {exc}") from exc
    # Maybe still being copied in (publish by renaming to avoid it): worth a retry.
    raise NotFoundError(f"No SavedModel in {path}: it has no {SAVED_MODEL_PB} (or .pbtxt)")


def _check_variables(path: str, meta_graph: Any) -> None:  # noqa: ANN401 - a MetaGraphDef
    """NotFoundError unless the variables the object graph declares have their files.

    Missing files may still be being copied in, so the load is retried (TF
    itself reports a missing data shard as UNKNOWN); corrupt ones are
    DATA_LOSS, from TensorFlow.
    """
    variables = sum(
        1 for node in meta_graph.object_graph_def.nodes if node.WhichOneof("kind") == "variable"
    )
    if not variables:
        return
    index = os.path.join(path, VARIABLES_INDEX)
    if not os.path.isfile(index):
        raise NotFoundError(
            f"The SavedModel in {path} has {variables} variables, but {index} is missing"
        )
    directory = os.path.dirname(index)
    shards = [match for name in os.listdir(directory) if (match := _SHARD.fullmatch(name))]
    counts = {int(shard[1]) for shard in shards} or {1}
    expected = {f"variables.data-{i:05d}-of-{n:05d}" for n in counts for i in range(n)}
    missing = sorted(expected - {shard[0] for shard in shards})
    if missing:
        raise NotFoundError(
            f"The SavedModel in {path} has {variables} variables, but "
            f"{os.path.join(directory, missing[0])} is missing"
        )


def _tensor_specs(tensor_infos: Mapping[str, Any]) -> list[TensorSpec]:
    tf = tensorflow()
    specs = []
    for key, info in sorted(tensor_infos.items()):
        if info.WhichOneof("encoding") != "name":
            raise _UnsupportedTensorError(f"tensor '{key}' is not dense")
        dtype = tf.dtypes.as_dtype(info.dtype)
        if dtype == tf.string:
            numpy_dtype: Any = np.dtype(object)
        elif dtype in (tf.resource, tf.variant) or not dtype.is_numpy_compatible:
            raise _UnsupportedTensorError(f"tensor '{key}' has dtype {dtype.name}")
        else:
            numpy_dtype = dtype.as_numpy_dtype
        shape = info.tensor_shape
        dims = None if shape.unknown_rank else [d.size for d in shape.dim]
        specs.append(TensorSpec(key, numpy_dtype, dims, tensor_name=info.name))
    return specs
