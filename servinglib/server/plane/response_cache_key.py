"""The key of a request in the response cache: a digest of everything that makes its answer."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

from servinglib.request_extras import ParameterValue
from servinglib.servable import CallSite

_DIGEST_BYTES = 32


def response_cache_key(
    site: CallSite,
    inputs: Mapping[str, npt.NDArray[Any]],
    output_filter: Iterable[str] | None,
    parameters: Mapping[str, ParameterValue],
) -> bytes | None:
    """A BLAKE2b digest of the model, version, signature, requested outputs, the request's
    parameters (those that reach the model) and each input's name, dtype, shape and bytes;
    None for a request that cannot be keyed (a string tensor holding something but bytes).

    Every part is written with its length, so no two different requests write the same
    stream of bytes.
    """
    digest = hashlib.blake2b(digest_size=_DIGEST_BYTES)
    _text(digest, site.model_name)
    _text(digest, str(site.version))
    _text(digest, site.signature_name)
    wanted = sorted(output_filter) if output_filter is not None else ["*"]
    _text(digest, "\0".join(wanted))
    _text(digest, repr(sorted((k, type(v).__name__, v) for k, v in parameters.items())))
    for name in sorted(inputs):
        value = inputs[name]
        _text(digest, name)
        _text(digest, value.dtype.str)
        _text(digest, repr(value.shape))
        if value.dtype.kind == "O":
            for item in value.flat:
                if not isinstance(item, bytes):
                    return None
                _bytes(digest, item)
        else:
            _bytes(digest, np.ascontiguousarray(value).reshape(-1).view(np.uint8))
    return digest.digest()


def _text(digest: Any, text: str) -> None:  # noqa: ANN401 - hashlib's private type
    _bytes(digest, text.encode("utf-8", "surrogatepass"))


def _bytes(digest: Any, data: bytes | npt.NDArray[np.uint8]) -> None:  # noqa: ANN401 - hashlib's private type
    digest.update(len(data).to_bytes(8, "little"))
    digest.update(data)
