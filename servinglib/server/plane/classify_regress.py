"""Classify and Regress over tf.Examples: TF Serving's signature checks and result shapes.

Front ends build the serialized tf.Examples; this module checks the signature the way TF
Serving's ``classifier.cc`` / ``regressor.cc`` do, runs it through the :class:`DataPlane` and
turns its outputs into per-example results, so both protocols report the same errors.
"""

from __future__ import annotations

from typing import Any, Final, final

import attrs
import numpy as np
import numpy.typing as npt

from servinglib.errors import InvalidArgumentError
from servinglib.servable import (
    CLASSIFY_METHOD,
    REGRESS_METHOD,
    SignatureSpec,
    find_signature,
)
from servinglib.server.model_spec import ModelSpec
from servinglib.server.plane.data_plane import DataPlane, InferenceResult

CLASSIFY_INPUTS = "inputs"
CLASSIFY_OUTPUT_CLASSES = "classes"
CLASSIFY_OUTPUT_SCORES = "scores"
REGRESS_INPUTS = "inputs"
REGRESS_OUTPUTS = "outputs"


@final
@attrs.frozen
class ClassifyResult:
    """Per example, its (label, score) pairs; ``None`` where the signature has no such output.

    Immutable, so thread-safe.
    """

    model_name: str
    version: int
    signature_name: str
    classifications: list[list[tuple[bytes | None, float | None]]]


@final
@attrs.frozen
class RegressResult:
    """One regression value per example.  Immutable, so thread-safe."""

    model_name: str
    version: int
    signature_name: str
    values: list[float]


@final
@attrs.frozen
class ExamplesCall:
    """A checked classify or regress call: the version to run (pinned, so the checked signature
    is the one that runs), the signature, its one input.  Immutable, so thread-safe."""

    model_spec: ModelSpec
    signature_name: str
    inputs: dict[str, npt.NDArray[Any]]


def examples_call(
    plane: DataPlane,
    method: str,
    model_spec: ModelSpec,
    signature_name: str | None,
    serialized_examples: npt.NDArray[Any],
) -> ExamplesCall:
    """The checked call of :func:`classify` (``method`` CLASSIFY_METHOD) or :func:`regress`, for a
    caller that runs it itself and passes its result to :func:`classified` or :func:`regressed`.
    """
    pinned, name, spec = _signature_of(plane, model_spec, signature_name)
    _SIGNATURE_CHECKS[method](spec)
    _count_examples(serialized_examples)
    return ExamplesCall(pinned, name, {CLASSIFY_INPUTS: serialized_examples})  # = REGRESS_INPUTS


async def classify(
    plane: DataPlane,
    model_spec: ModelSpec,
    signature_name: str | None,
    serialized_examples: npt.NDArray[Any],
    *,
    deadline: float | None = None,
    log_request: bool = True,
) -> ClassifyResult:
    """Classifies ``serialized_examples`` (object array of bytes, shape [n]).

    Requires: each element is a serialized tf.Example (context already
    merged in).  Raises InvalidArgumentError for no examples, a signature
    that is not a classify signature or does not follow its tensor rules, or
    outputs of the wrong shape or dtype; FailedPreconditionError for an
    unknown signature; and whatever :meth:`DataPlane.infer` raises.
    A sampled request of a model with a ``logging_config`` is logged as a
    ``classify_log`` (``log_request=False``: the caller logs it).
    Thread safety: a coroutine; run it on any event loop, concurrently.
    """
    await plane.loaded(model_spec, deadline=deadline)  # a model loaded on demand: its load
    call = examples_call(plane, CLASSIFY_METHOD, model_spec, signature_name, serialized_examples)
    result = await plane.infer(
        call.model_spec, call.signature_name, call.inputs, deadline=deadline, log_request=False
    )
    return classified(plane, call, result, log_request=log_request)


def classified(
    plane: DataPlane, call: ExamplesCall, result: InferenceResult, *, log_request: bool = True
) -> ClassifyResult:
    """:func:`classify`'s result from what ``call`` returned: checked, and logged if sampled."""
    examples = call.inputs[CLASSIFY_INPUTS]
    count = len(examples)
    classes = result.outputs.get(CLASSIFY_OUTPUT_CLASSES)
    scores = result.outputs.get(CLASSIFY_OUTPUT_SCORES)
    num_classes = _check_classify_outputs(classes, scores, count)
    labels = classes.tolist() if classes is not None else [[None] * num_classes] * count
    values = scores.tolist() if scores is not None else [[None] * num_classes] * count
    classifications = [
        [(_label(label), score) for label, score in zip(row_labels, row_scores, strict=True)]
        for row_labels, row_scores in zip(labels, values, strict=True)
    ]
    answer = ClassifyResult(result.model_name, result.version, call.signature_name, classifications)
    if log_request:
        _log_request(plane, "classify", answer, examples, classifications)
    return answer


async def regress(
    plane: DataPlane,
    model_spec: ModelSpec,
    signature_name: str | None,
    serialized_examples: npt.NDArray[Any],
    *,
    deadline: float | None = None,
    log_request: bool = True,
) -> RegressResult:
    """Regresses ``serialized_examples`` as :func:`classify` classifies them, with a regress
    signature (its output checked as TF Serving does; logged as a ``regress_log``).
    """
    await plane.loaded(model_spec, deadline=deadline)  # a model loaded on demand: its load
    call = examples_call(plane, REGRESS_METHOD, model_spec, signature_name, serialized_examples)
    result = await plane.infer(
        call.model_spec, call.signature_name, call.inputs, deadline=deadline, log_request=False
    )
    return regressed(plane, call, result, log_request=log_request)


def regressed(
    plane: DataPlane, call: ExamplesCall, result: InferenceResult, *, log_request: bool = True
) -> RegressResult:
    """:func:`regress`'s result from what ``call`` returned: checked, and logged if sampled."""
    examples = call.inputs[REGRESS_INPUTS]
    count = len(examples)
    outputs = result.outputs[REGRESS_OUTPUTS]
    if outputs.dtype != np.float32:
        raise InvalidArgumentError(f"Expected output Tensor of DT_FLOAT. Got: {outputs.dtype}")
    if not (outputs.ndim == 1 or (outputs.ndim == 2 and outputs.shape[1] == 1)):
        raise InvalidArgumentError(
            "Expected output Tensor shape to be either [batch_size] or [batch_size, 1] but got "
            f"{list(outputs.shape)}"
        )
    if outputs.shape[0] != count:
        raise InvalidArgumentError(
            f"Input batch size did not match output batch size: {count} vs. {outputs.shape[0]}"
        )
    values: list[float] = outputs.reshape(-1).tolist()
    answer = RegressResult(result.model_name, result.version, call.signature_name, values)
    if log_request:
        _log_request(plane, "regress", answer, examples, values)
    return answer


def _log_request(
    plane: DataPlane,
    kind: str,
    result: ClassifyResult | RegressResult,
    serialized_examples: npt.NDArray[Any],
    answer: object,
) -> None:
    """Hands a sampled classify or regress request to the plane's request logger."""
    logger = plane.request_logger
    logging = logger.sampled(result.model_name)
    if logging is not None:
        logger.log(
            logging,
            result.model_name,
            kind,
            result.model_name,
            result.version,
            result.signature_name,
            serialized_examples.reshape(-1).tolist(),
            answer,
        )


def _signature_of(
    plane: DataPlane, model_spec: ModelSpec, signature_name: str | None
) -> tuple[ModelSpec, str, SignatureSpec]:
    """The version to run (pinned, so the checked signature is the one that runs), name, spec."""
    pinned, signatures = plane.signatures(model_spec)
    name, spec = find_signature(signatures, signature_name)
    return pinned, name, spec


def _check_method_and_one_input(spec: SignatureSpec, method: str, kind: str) -> None:
    if spec.method_name != method:
        raise InvalidArgumentError(
            f"Expected {kind} signature method_name to be {method}. Was: {spec.method_name}"
        )
    if len(spec.inputs) != 1:
        raise InvalidArgumentError(
            f"Expected one input Tensor, found {len(spec.inputs)}: {sorted(spec.inputs)}"
        )


def _check_classify_signature(spec: SignatureSpec) -> None:
    _check_method_and_one_input(spec, CLASSIFY_METHOD, "classification")
    if CLASSIFY_INPUTS not in spec.inputs:
        raise InvalidArgumentError(
            f"No classification inputs found in the signature: its input is "
            f"{next(iter(spec.inputs))!r}, expected {CLASSIFY_INPUTS!r}"
        )
    if len(spec.outputs) not in (1, 2):
        raise InvalidArgumentError(f"Expected one or two output Tensors, found {len(spec.outputs)}")
    if CLASSIFY_OUTPUT_CLASSES not in spec.outputs and CLASSIFY_OUTPUT_SCORES not in spec.outputs:
        raise InvalidArgumentError(
            'Expected classification signature outputs to contain at least one of "classes" or '
            f'"scores"; its outputs are {sorted(spec.outputs)}'
        )


def _check_regress_signature(spec: SignatureSpec) -> None:
    _check_method_and_one_input(spec, REGRESS_METHOD, "regression")
    if len(spec.outputs) != 1:
        raise InvalidArgumentError(
            f"Expected one output Tensor, found {len(spec.outputs)}: {sorted(spec.outputs)}"
        )
    if REGRESS_INPUTS not in spec.inputs:
        raise InvalidArgumentError(
            f"No regression inputs found in the signature: its input is "
            f"{next(iter(spec.inputs))!r}, expected {REGRESS_INPUTS!r}"
        )
    if REGRESS_OUTPUTS not in spec.outputs:
        raise InvalidArgumentError(
            f"No regression outputs found in the signature: its output is "
            f"{next(iter(spec.outputs))!r}, expected {REGRESS_OUTPUTS!r}"
        )


_SIGNATURE_CHECKS: Final = {
    CLASSIFY_METHOD: _check_classify_signature,
    REGRESS_METHOD: _check_regress_signature,
}


def _count_examples(serialized_examples: npt.NDArray[Any]) -> int:
    if serialized_examples.ndim != 1:
        raise InvalidArgumentError(
            f"Serialized examples must be a vector, got shape {list(serialized_examples.shape)}"
        )
    if serialized_examples.shape[0] == 0:
        raise InvalidArgumentError("Input is empty: the request holds no examples")
    return int(serialized_examples.shape[0])


def _check_classify_outputs(
    classes: npt.NDArray[Any] | None, scores: npt.NDArray[Any] | None, count: int
) -> int:
    """The number of classes per example, after TF Serving's checks of both outputs."""
    for what, tensor in (("classes", classes), ("scores", scores)):
        if tensor is None:
            continue
        if tensor.ndim != 2:
            raise InvalidArgumentError(
                f"Expected {what} Tensor shape: [batch_size num_classes] but got "
                f"{list(tensor.shape)}"
            )
        if tensor.shape[0] != count:
            raise InvalidArgumentError(
                f"Expected {what} output batch size of {count}. Got: {tensor.shape[0]}"
            )
    if classes is not None and classes.dtype != np.dtype(object):
        raise InvalidArgumentError(f"Expected classes Tensor of DT_STRING. Got: {classes.dtype}")
    if scores is not None and scores.dtype != np.float32:
        raise InvalidArgumentError(f"Expected scores Tensor of DT_FLOAT. Got: {scores.dtype}")
    if classes is not None and scores is not None:
        if classes.shape[1] != scores.shape[1]:
            raise InvalidArgumentError(
                "Tensors class and score should match in dim_size(1). Got "
                f"{classes.shape[1]} vs. {scores.shape[1]}"
            )
        return int(classes.shape[1])
    tensor = classes if classes is not None else scores
    return int(tensor.shape[1]) if tensor is not None else 0


def _label(value: object) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return str(value).encode("utf-8")
