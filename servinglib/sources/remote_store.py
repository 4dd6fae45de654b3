"""Object-storage base paths (``s3://``, ``gs://``, ``az://``, ``abfs://``) through fsspec."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from servinglib._install import install_hint
from servinglib.errors import InvalidArgumentError

_EXTRAS: Mapping[str, tuple[str, str]] = {
    "s3": ("s3fs", "s3"),
    "s3a": ("s3fs", "s3"),
    "gs": ("gcsfs", "gcs"),
    "gcs": ("gcsfs", "gcs"),
    "az": ("adlfs", "azure"),
    "abfs": ("adlfs", "azure"),
    "abfss": ("adlfs", "azure"),
}
"""Remote scheme → (the module implementing it, the servinglib extra that installs it)."""


def remote_scheme(path: str) -> str | None:
    """The object-store scheme of ``path`` (``"s3"``, ...), or None for a local path."""
    scheme, sep, _ = path.partition("://")
    return scheme.lower() if sep and scheme.lower() in _EXTRAS else None


def is_remote(path: str) -> bool:
    """Whether ``path`` names an object-store prefix rather than a local directory."""
    return remote_scheme(path) is not None


def local_path(path: str) -> str:
    """``path`` without a ``file://`` scheme (other paths unchanged)."""
    return path[len("file://") :] if path.lower().startswith("file://") else path


def check_installed(path: str) -> None:
    """Raises InvalidArgumentError naming the ``pip install`` if ``path``'s store is missing."""
    scheme = remote_scheme(path)
    if scheme is None:
        return
    module, extra = _EXTRAS[scheme]
    try:
        __import__("fsspec")
        __import__(module)
    except ImportError:
        raise InvalidArgumentError(
            f"Serving {scheme}:// base paths needs {module}: {install_hint(extra)}"
        ) from None


def open_store(path: str, storage_options: Mapping[str, Any] | None = None) -> tuple[Any, str]:
    """(an fsspec file system, the path within it) for the remote ``path``.

    ``storage_options`` go to the file system as fsspec takes them; for S3,
    TF Serving's variables fill in the endpoint when ``AWS_ENDPOINT_URL``
    does not.  Listing caches are off: every poll must see the store as it is.
    """
    check_installed(path)
    import fsspec  # optional extra: imported when a remote path is served

    options: dict[str, Any] = {"use_listings_cache": False, "skip_instance_cache": True}
    scheme = remote_scheme(path)
    if scheme in ("s3", "s3a"):
        options.update(_tf_serving_s3_options(os.environ))
    if scheme in ("gs", "gcs") and os.environ.get("STORAGE_EMULATOR_HOST"):
        options["token"] = "anon"  # an emulator takes no credentials
    options.update(storage_options or {})
    if scheme in ("gs", "gcs") and not _truthy(os.environ.get(_GCSFS_EXTENDED, "")):
        # gcsfs's default class (unless told otherwise) asks the Storage Control API over
        # gRPC for every bucket's layout, and does not remember a failed answer: against an
        # emulator, or without that API, each listing then waits for its 60 s timeout.
        from gcsfs.core import GCSFileSystem

        gcs = GCSFileSystem(**options)
        return gcs, gcs._strip_protocol(path).rstrip("/")  # noqa: SLF001 - fsspec's own parse
    fs, inner = fsspec.core.url_to_fs(path, **options)
    return fs, inner.rstrip("/")


_GCSFS_EXTENDED = "GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"


def _truthy(value: str) -> bool:
    return value.strip().lower() in ("1", "true")


def _tf_serving_s3_options(env: Mapping[str, str]) -> dict[str, Any]:
    """s3fs options from TF Serving's S3 variables, where the AWS standard ones say nothing."""
    client: dict[str, Any] = {}
    endpoint = env.get("S3_ENDPOINT")
    if endpoint and not (env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")):
        if "://" not in endpoint:
            https = env.get("S3_USE_HTTPS", "1").lower() not in ("0", "false")
            endpoint = f"{'https' if https else 'http'}://{endpoint}"
        client["endpoint_url"] = endpoint
    if env.get("S3_VERIFY_SSL", "1").lower() in ("0", "false"):
        client["verify"] = False
    return {"client_kwargs": client} if client else {}
