"""Which platform serves the model under a base path: its version directories' files decide."""

from __future__ import annotations

import os
from typing import final

import attrs

from servinglib.errors import InvalidArgumentError, UnavailableError
from servinglib.loaders.registry import (
    DEFAULT_MODEL_PLATFORM,
    PlatformRegistry,
    default_registry,
)
from servinglib.sources.remote_mirror import list_versions
from servinglib.sources.remote_store import is_remote

INFERENCE_LISTING_TIMEOUT_S = 10.0
"""How long a guess at a remote model's platform waits for its store's listing: a store that
does not answer (an unknown host makes gcsfs retry for about 50 s) delays the server's start by
at most this, and the guess falls back to the default, saying why."""


@final
@attrs.frozen
class PlatformChoice:
    """The platform to serve a model with, and why (a clause for the log line).  Immutable."""

    platform: str
    reason: str


def infer_model_platform(
    base_path: str, registry: PlatformRegistry = default_registry
) -> PlatformChoice:
    """The platform of the model whose numbered version directories are under ``base_path``.

    The highest version the registry recognizes decides (a newer version
    may still be being written); without version directories, the files of
    a bare model in ``base_path`` itself (served as version 0); without
    any, TF Serving's default ``tensorflow``.  An object-store base path
    (``s3://``, ...) is listed once and its versions' keys decide the same
    way (a store that cannot be listed within :data:`INFERENCE_LISTING_TIMEOUT_S`: the default,
    saying why).  Requires:
    ``base_path`` absolute, or a URI (only an object store's is looked into).
    Raises InvalidArgumentError when a version holds the files of more than
    one platform.
    """
    if is_remote(base_path):
        return _infer_remote(base_path, registry)
    if not os.path.isabs(base_path):
        return _default(f"{base_path} is not a local directory and not looked into")
    return _infer_local(base_path, registry)


def _infer_local(base_path: str, registry: PlatformRegistry) -> PlatformChoice:
    """:func:`infer_model_platform` of an absolute local base path, from its files."""
    versions = _versions(base_path)
    if not versions:
        bare = registry.platforms_recognizing(base_path)
        if len(bare) == 1:
            return PlatformChoice(
                bare[0], f"inferred from the model in {base_path} itself, served as version 0"
            )
        if bare:
            raise InvalidArgumentError(
                f"{base_path} holds the files of platforms {' and '.join(bare)}: "
                "say which with --model_platform"
            )
        if not os.path.isdir(base_path):
            return _default(f"{base_path} does not exist (yet)")
        return _default(f"{base_path} holds no version directory yet")
    for version in versions:
        directory = os.path.join(base_path, version)
        platforms = registry.platforms_recognizing(directory)
        if len(platforms) == 1:
            return PlatformChoice(platforms[0], f"inferred from version {version}'s files")
        if platforms:
            raise InvalidArgumentError(
                f"{directory} holds the files of platforms {' and '.join(platforms)}: "
                "say which with --model_platform"
            )
    return _default(f"no version under {base_path} holds files of a known platform")


def _infer_remote(base_path: str, registry: PlatformRegistry) -> PlatformChoice:
    """:func:`infer_model_platform` of an object-store base path, from one listing's keys."""
    try:
        versions = list_versions(base_path, timeout_s=INFERENCE_LISTING_TIMEOUT_S)
    except UnavailableError as error:
        return _default(error.message)
    for version in sorted(versions, reverse=True):
        entries = {key.split("/", 1)[0] for key in versions[version]}
        platforms = registry.platforms_recognizing_names(entries)
        if len(platforms) == 1:
            return PlatformChoice(
                platforms[0], f"inferred from version {version}'s keys under {base_path}"
            )
        if platforms:
            raise InvalidArgumentError(
                f"Version {version} under {base_path} holds the files of platforms "
                f"{' and '.join(platforms)}: say which with --model_platform"
            )
    if not versions:
        return _default(f"no version under {base_path} yet")
    return _default(f"no version under {base_path} holds files of a known platform")


def _default(why: str) -> PlatformChoice:
    return PlatformChoice(
        DEFAULT_MODEL_PLATFORM, f"{why}: TF Serving's default; --model_platform chooses another"
    )


def _versions(base_path: str) -> list[str]:
    """The names of the numbered subdirectories of ``base_path``, highest number first."""
    try:
        names = os.listdir(base_path)
    except OSError:
        return []
    numbered = [
        name
        for name in names
        if name.isascii() and name.isdigit() and os.path.isdir(os.path.join(base_path, name))
    ]
    return sorted(numbered, key=int, reverse=True)
