"""The platform registry: model platform name → the SourceAdapter that loads its versions."""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeAlias, final

import attrs

from servinglib import _install
from servinglib.core.loader import Loader
from servinglib.errors import (
    AlreadyExistsError,
    FailedPreconditionError,
    InvalidArgumentError,
    ServingError,
)
from servinglib.sources.source import StoragePath
from servinglib.sources.source_adapter import ErrorInjectingSourceAdapter, SourceAdapter
from servinglib.sources.version_check import VersionCheck, holds_a_file

_log = logging.getLogger(__name__)

PlatformAdapter: TypeAlias = SourceAdapter[StoragePath, Loader]
AdapterFactory: TypeAlias = Callable[[Any], PlatformAdapter]
"""``factory(platform_config)`` → the adapter; ``platform_config`` is the platform's own
config object, or None for its defaults."""
VersionCheckFactory: TypeAlias = Callable[[Any], VersionCheck]
"""``version_check(platform_config)`` → the check of the platform's version directories."""

ENTRY_POINT_GROUP = "servinglib.platforms"

DEFAULT_MODEL_PLATFORM = "tensorflow"
"""TF Serving's platform for a model whose config names none."""
"""Packages register platforms under this entry-point group: ``name = "module:factory"``."""


@final
@attrs.frozen
class Platform:
    """A registered platform: its factory (or ``"module:attribute"`` to import lazily).

    ``requires``: modules that must be importable (checked without importing
    them), ``install_hint`` how to get them.  ``config_message`` and
    ``config_from_message`` let a ``--platform_config_file`` configure it.
    ``recognizes``: files whose presence shows a version directory holds this
    platform's model.  ``version_check`` (a factory taking the platform's
    config, or ``"module:function"``): what a complete version holds (None:
    any file).
    Immutable, so thread-safe.
    """

    name: str
    factory: AdapterFactory | str
    requires: tuple[str, ...] = ()
    install_hint: str = ""
    config_message: str = ""
    config_from_message: Callable[[Any], Any] | str | None = None
    recognizes: tuple[str, ...] = ()
    version_check: VersionCheckFactory | str | None = None


_BUILTIN = (
    Platform(
        "tensorflow",
        "servinglib.loaders.tensorflow:make_adapter",
        requires=("tensorflow",),
        install_hint=_install.install_hint("tensorflow"),
        config_message="servinglib.protos.platform_options_pb2:TensorFlowPlatformOptions",
        config_from_message="servinglib.loaders.tensorflow.config:config_from_message",
        recognizes=("saved_model.pb", "saved_model.pbtxt"),
        version_check="servinglib.loaders.tensorflow.saved_model_files:version_check",
    ),
    Platform(
        "python",
        "servinglib.loaders.python:make_adapter",
        config_message="servinglib.protos.platform_options_pb2:PythonPlatformOptions",
        config_from_message="servinglib.loaders.python:config_from_message",
        recognizes=("model.py",),  # PythonPlatformConfig's default entry point
        version_check="servinglib.loaders.python:version_check",
    ),
    Platform(
        "ensemble",
        "servinglib.loaders.triton.ensemble:make_adapter",
        version_check="servinglib.loaders.triton.ensemble:version_check",
    ),
)


@final
class PlatformRegistry:
    """Knows every platform: the built-in ones, registered ones, and entry points.

    :meth:`make_adapter` never raises for a bad platform: it returns an
    adapter that turns every version into an error saying what is wrong
    (unknown platform, with the known ones; a missing optional dependency,
    with the install hint), so the servable's state shows it.
    Thread-safe.
    """

    def __init__(self, platforms: Sequence[Platform] = _BUILTIN) -> None:
        self._lock = threading.Lock()
        self._platforms = {p.name: p for p in platforms}  # guarded by: _lock
        self._entry_points_loaded = False  # guarded by: _lock

    def register(self, platform: Platform, *, replace: bool = False) -> None:
        """Adds ``platform``; AlreadyExistsError if the name is taken (unless ``replace``)."""
        with self._lock:
            self._load_entry_points_locked()
            if platform.name in self._platforms and not replace:
                raise AlreadyExistsError(f"Model platform '{platform.name}' is already registered")
            self._platforms[platform.name] = platform

    def names(self) -> list[str]:
        """Every known platform name, sorted."""
        with self._lock:
            self._load_entry_points_locked()
            return sorted(self._platforms)

    def platforms_recognizing(self, version_dir: str) -> list[str]:
        """The platforms whose ``recognizes`` files ``version_dir`` holds, sorted.

        Looks only at the directory's own entries (no file is opened), so a
        version still being written may be recognized before it is complete.
        """
        try:
            present = os.listdir(version_dir)
        except OSError:
            return []
        return self.platforms_recognizing_names(present)

    def platforms_recognizing_names(self, names: Iterable[str]) -> list[str]:
        """The platforms whose ``recognizes`` files are among ``names`` (a version's own
        entries: its files and directories, say an object store's keys cut at their first
        ``/``), sorted."""
        with self._lock:
            self._load_entry_points_locked()
            platforms = list(self._platforms.values())
        present = set(names)
        return sorted(p.name for p in platforms if present.intersection(p.recognizes))

    def make_adapter(self, name: str, platform_config: Any = None) -> PlatformAdapter:  # noqa: ANN401 - each platform has its own config type
        """The adapter turning version directories of platform ``name`` into Loaders."""
        with self._lock:
            self._load_entry_points_locked()
            platform = self._platforms.get(name)
            known = ", ".join(sorted(self._platforms))
        if platform is None:
            return _failing(
                InvalidArgumentError(f"Model platform '{name}' is not supported; known: {known}")
            )
        missing = [m for m in platform.requires if importlib.util.find_spec(m) is None]
        if missing:
            hint = f": {platform.install_hint}" if platform.install_hint else ""
            return _failing(
                FailedPreconditionError(
                    f"Model platform '{name}' needs {', '.join(missing)}, which is not "
                    f"installed{hint}"
                )
            )
        try:
            factory: AdapterFactory = _resolve(platform.factory)
            return factory(platform_config)
        except ServingError as error:
            return _failing(error)
        except Exception as exc:  # noqa: BLE001 - a broken platform must not break the others
            return _failing(ServingError.wrap(exc, f"Model platform '{name}' failed to start"))

    def version_check(self, name: str, platform_config: Any = None) -> VersionCheck:  # noqa: ANN401 - each platform has its own config type
        """What a complete version directory of platform ``name`` holds (see :class:`Platform`).

        An unknown platform, or one that declares no check, gets the default
        (any file); a check that raises counts as "not complete yet".
        """
        with self._lock:
            self._load_entry_points_locked()
            platform = self._platforms.get(name)
        if platform is None or platform.version_check is None:
            return holds_a_file
        try:
            make_check: VersionCheckFactory = _resolve(platform.version_check)
            return _never_raising(make_check(platform_config))
        except Exception:  # noqa: BLE001 - a broken check must not break the platform
            _log.exception("Model platform '%s': its version check failed; any file will do", name)
            return holds_a_file

    def config_from_any(self, name: str, config: Any) -> Any:  # noqa: ANN401 - a google.protobuf.Any; the platform's config
        """Platform ``name``'s config from a ``google.protobuf.Any`` holding its config message.

        Raises InvalidArgumentError for an unknown platform, a platform that
        takes no config message, or an Any holding another message type.
        """
        with self._lock:
            self._load_entry_points_locked()
            platform = self._platforms.get(name)
        if platform is None:
            raise InvalidArgumentError(f"Model platform '{name}' is not supported")
        if not platform.config_message or platform.config_from_message is None:
            raise InvalidArgumentError(f"Model platform '{name}' takes no config message")
        message_type: Any = _resolve(platform.config_message)
        full_name = message_type.DESCRIPTOR.full_name
        if config.type_url.rpartition("/")[2] != full_name:
            raise InvalidArgumentError(
                f"Model platform '{name}' takes a {full_name}, not {config.type_url}"
            )
        message = message_type()
        config.Unpack(message)
        convert: Callable[[Any], Any] = _resolve(platform.config_from_message)
        return convert(message)

    def import_config_messages(self) -> None:
        """Imports every platform's config message, so text files can name them in an Any."""
        with self._lock:
            self._load_entry_points_locked()
            platforms = list(self._platforms.values())
        for platform in platforms:
            if platform.config_message:
                _resolve(platform.config_message)

    def _load_entry_points_locked(self) -> None:
        if self._entry_points_loaded:
            return
        self._entry_points_loaded = True
        import importlib.metadata  # only when the platforms are first looked up

        for entry in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP):
            self._platforms.setdefault(entry.name, Platform(entry.name, entry.value))


def _resolve(factory: Any) -> Any:  # noqa: ANN401 - a factory, function or class, or its "module:name"
    if not isinstance(factory, str):
        return factory
    module_name, _, attribute = factory.partition(":")
    return getattr(importlib.import_module(module_name), attribute)


def _never_raising(check: VersionCheck) -> VersionCheck:
    def guarded(path: str) -> str | None:
        try:
            return check(path)
        except Exception as exc:  # noqa: BLE001 - a broken check must not stop the source
            return f"its completeness check failed: {exc!r}"

    return guarded


def _failing(error: ServingError) -> PlatformAdapter:
    return ErrorInjectingSourceAdapter(error)


default_registry = PlatformRegistry()
"""The registry ServerCore and the CLI use."""


def register_platform(
    name: str,
    factory: AdapterFactory | str,
    *,
    requires: Sequence[str] = (),
    install_hint: str = "",
    config_message: str = "",
    config_from_message: Callable[[Any], Any] | str | None = None,
    recognizes: Sequence[str] = (),
    version_check: VersionCheckFactory | str | None = None,
    replace: bool = False,
) -> None:
    """Makes platform ``name`` available to config files and the CLI (the default registry).

    ``factory(platform_config)`` returns a ``SourceAdapter[StoragePath, Loader]``
    (or is ``"module:attribute"``, imported when the platform is first used);
    the other arguments: see :class:`Platform`.
    """
    platform = Platform(
        name,
        factory,
        tuple(requires),
        install_hint,
        config_message,
        config_from_message,
        tuple(recognizes),
        version_check,
    )
    default_registry.register(platform, replace=replace)
