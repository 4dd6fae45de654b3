"""ModelConfig and ModelServerConfig: which models to serve, read from TF Serving's config files."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, TypeVar, final

import attrs

from servinglib.errors import (
    InvalidArgumentError,
    UnimplementedError,
    shortened,
)
from servinglib.loaders.registry import DEFAULT_MODEL_PLATFORM
from servinglib.protos.text_files import decode_text, parse_text, read_bytes
from servinglib.server._config_support import (
    FrozenLabels,
    as_ours,
    platform_of,
    policy_from_proto,
    policy_to_proto,
)
from servinglib.server.logging_config import LoggingConfig
from servinglib.server.traffic_rule import TrafficRule
from servinglib.sources.version_policy import ServableVersionPolicy, VersionPolicyKind

if TYPE_CHECKING:
    from google.protobuf import message as pb_message

    from servinglib.loaders.triton.config import TritonModelConfig
    from servinglib.protos import model_server_config_pb2 as config_pb2

_log = logging.getLogger(__name__)

_INT64_MAX = 2**63 - 1
_UINT32_MAX = 2**32 - 1
# TF Serving's REST paths address labels as [^/:]+ (model_servers/http_rest_api_handler.cc).
_LABEL = re.compile(r"[^/:]+")
# A URI such as gs://bucket/model is never relative (TF Serving's UriIsRelativePath).
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
_TF_SERVING_CONFIG = "tensorflow.serving.ModelServerConfig"
MAX_BASE_PATH_BYTES: Final = 4096
"""The longest base path, in UTF-8 bytes (Linux's PATH_MAX); longer is INVALID_ARGUMENT."""
MAX_PATH_COMPONENT_BYTES: Final = 255
"""The longest directory name of a local base path (NAME_MAX); longer is INVALID_ARGUMENT."""
_TF_SERVING_MODEL_CONFIG = "tensorflow.serving.ModelConfig"

_M = TypeVar("_M", bound="pb_message.Message")


def _fspath(path: str | os.PathLike[str]) -> str:
    return os.fspath(path) if isinstance(path, os.PathLike) else path


def _freeze_labels(labels: Mapping[str, int]) -> Mapping[str, int]:
    return labels if isinstance(labels, FrozenLabels) else FrozenLabels(labels)


def _models(models: Iterable[ModelConfig]) -> tuple[ModelConfig, ...]:
    return tuple(models)


@final
@attrs.frozen
class ModelConfig:
    """One model to serve: its name, where its versions are, its platform, versions and labels.

    TF Serving's ``ModelConfig``; the fields: docs/reference/config.md.
    ``storage_options``: for a base path in an object store, anything its
    fsspec file system takes; Python only (:meth:`to_proto` leaves it out).
    Raises InvalidArgumentError for an empty name or one with ``/``, an empty
    base path or platform, a base path holding a NUL byte or longer than
    MAX_BASE_PATH_BYTES (a local one's directory names at most
    MAX_PATH_COMPONENT_BYTES), a label that is empty or holds ``/`` or ``:``,
    or a version outside int64 (negative included).
    ``model_filename``: the file or directory inside each version directory
    the platform loads (Triton's ``default_model_filename``; empty: the
    version directory itself).  ``triton_config``: the completed Triton
    ``config.pbtxt`` the model was configured from, which the config
    questions answer with.  ``load_on_demand``: registered, loaded on its
    first request and unloaded to make room (True), or pinned: loaded at
    once and kept (False); None: the server's default.  ``traffic``: which
    version answers requests that name none, and a shadow version
    (:class:`~servinglib.server.traffic_rule.TrafficRule`; None: the policy's).
    Immutable, so thread-safe.
    """

    name: str
    base_path: str = attrs.field(converter=_fspath)
    model_platform: str = DEFAULT_MODEL_PLATFORM
    version_policy: ServableVersionPolicy = attrs.field(factory=ServableVersionPolicy.latest)
    version_labels: Mapping[str, int] = attrs.field(factory=dict, converter=_freeze_labels)
    logging_config: LoggingConfig | None = attrs.field(default=None, kw_only=True)
    storage_options: Mapping[str, Any] | None = attrs.field(default=None, kw_only=True, hash=False)
    model_filename: str = attrs.field(default="", kw_only=True)
    triton_config: TritonModelConfig | None = attrs.field(
        default=None, kw_only=True, hash=False, repr=False
    )
    load_on_demand: bool | None = attrs.field(default=None, kw_only=True)
    traffic: TrafficRule | None = attrs.field(default=None, kw_only=True)

    def loads_on_demand(self, server_default: bool) -> bool:
        """Whether this model is registered and loaded on its first request (``load_on_demand``;
        None: ``server_default``, ServerCoreOptions.load_models_on_demand), or pinned."""
        return server_default if self.load_on_demand is None else self.load_on_demand

    def __attrs_post_init__(self) -> None:
        _check_model(self)

    @classmethod
    def tensorflow(cls, name: str, base_path: str | os.PathLike[str]) -> ModelConfig:
        """A SavedModel served with the latest version (TF Serving's default)."""
        return cls(name, base_path, "tensorflow")

    @classmethod
    def python(cls, name: str, base_path: str | os.PathLike[str]) -> ModelConfig:
        """A Python model (``model.py`` per version) served with the latest version."""
        return cls(name, base_path, "python")

    @property
    def required_models(self) -> tuple[tuple[str, int | None], ...]:
        """The models (and versions; None: the one each serves) this one calls to answer: an
        ensemble's step models.  It is ready only while they are."""
        if self.triton_config is None or self.triton_config.message.platform != "ensemble":
            return ()
        from servinglib.loaders.triton.ensemble_graph import step_models  # ensembles only

        return step_models(self.triton_config.message)

    @property
    def base_path_is_relative(self) -> bool:
        """True when ``base_path`` is neither absolute nor a URI such as ``gs://b/m``."""
        return _is_relative(self.base_path)

    def resolve_base_path(self, base_dir: str | os.PathLike[str]) -> ModelConfig:
        """This config with a relative ``base_path`` joined to ``base_dir`` (made absolute).

        Returns ``self`` when ``base_path`` is absolute or a URI.
        """
        if not self.base_path_is_relative:
            return self
        root = os.path.abspath(os.fspath(base_dir))
        return attrs.evolve(self, base_path=os.path.normpath(os.path.join(root, self.base_path)))

    def to_proto(self) -> config_pb2.ModelConfig:
        """The ``ModelConfig`` message (``model_platform`` always set, never ``model_type``)."""
        from servinglib.protos import model_server_config_pb2 as config_pb2

        message = config_pb2.ModelConfig(
            name=self.name, base_path=self.base_path, model_platform=self.model_platform
        )
        policy_to_proto(self.version_policy, message.model_version_policy)
        message.version_labels.update(self.version_labels)
        if self.logging_config is not None:
            self.logging_config.fill_proto(message.logging_config)
        if self.traffic is not None:
            self.traffic.fill_proto(message.traffic)
        return message

    @classmethod
    def from_proto(cls, message: pb_message.Message) -> ModelConfig:
        """A ``ModelConfig`` message (ours or TF Serving's) as a ModelConfig.

        Empty ``model_platform``: the deprecated ``model_type`` decides, else
        ``"tensorflow"``; an unset or ``latest {}`` policy means the latest
        version.  Raises InvalidArgumentError as the constructor does, for an
        invalid ``logging_config``, for ``model_type`` other than ``TENSORFLOW``,
        and for ``model_type`` together with ``model_platform``.
        """
        from servinglib.protos import model_server_config_pb2 as config_pb2

        ours = as_ours(message, config_pb2.ModelConfig, _TF_SERVING_MODEL_CONFIG)
        name = ours.name
        try:
            policy = policy_from_proto(ours.model_version_policy)
            logging_config = (
                LoggingConfig.from_proto(ours.logging_config)
                if ours.HasField("logging_config")
                else None
            )
            traffic = TrafficRule.from_proto(ours.traffic) if ours.HasField("traffic") else None
        except InvalidArgumentError as error:
            raise InvalidArgumentError(f"Model {name}: {error.message}") from None
        return cls(
            name,
            ours.base_path,
            platform_of(ours),
            policy,
            dict(ours.version_labels),
            logging_config=logging_config,
            traffic=traffic,
        )


def _check_model(model: ModelConfig) -> None:
    name = model.name
    if not isinstance(name, str):
        raise TypeError(f"a model name must be a str, got {name!r}")
    if not name:
        raise InvalidArgumentError("A model name must not be empty")
    if "/" in name:
        raise InvalidArgumentError(f"Model name {shortened(name)!r} must not contain '/'")
    if not isinstance(model.base_path, str):
        raise TypeError(f"Model {name}: base_path must be a str, got {model.base_path!r}")
    if not model.base_path:
        raise InvalidArgumentError(f"Model {name} has an empty base_path")
    _check_base_path(model)
    if not isinstance(model.model_platform, str):
        raise TypeError(f"Model {name}: model_platform must be a str, got {model.model_platform!r}")
    if not model.model_platform:
        raise InvalidArgumentError(f"Model {name} has an empty model_platform")
    _check_policy(name, model.version_policy)
    _check_model_filename(model)
    if model.traffic is not None and not isinstance(model.traffic, TrafficRule):
        raise TypeError(f"Model {name}: traffic must be a TrafficRule, got {model.traffic!r}")
    for label, version in model.version_labels.items():
        _check_label(name, label, version)


def _check_base_path(model: ModelConfig) -> None:
    """No NUL byte, and a length a file system takes (PATH_MAX; NAME_MAX per local component)."""
    path = model.base_path
    if "\0" in path:
        raise InvalidArgumentError(
            f"Model {shortened(model.name)}: base_path {shortened(path)!r} contains a NUL byte"
        )
    size = len(path.encode("utf-8", "surrogatepass"))
    longest = (
        0
        if _URI.match(path)
        else max(len(part.encode("utf-8", "surrogatepass")) for part in path.split("/"))
    )
    if size > MAX_BASE_PATH_BYTES or longest > MAX_PATH_COMPONENT_BYTES:
        raise InvalidArgumentError(
            f"Model {shortened(model.name)}: base_path {shortened(path)!r} is too long "
            f"({size} bytes, the longest directory name {longest}): a base path holds at most "
            f"{MAX_BASE_PATH_BYTES} bytes, each of its directory names at most "
            f"{MAX_PATH_COMPONENT_BYTES}"
        )


def _check_model_filename(model: ModelConfig) -> None:
    """A path inside a version directory: relative, without ``..`` or a NUL byte."""
    filename = model.model_filename
    if not isinstance(filename, str):
        raise TypeError(f"Model {model.name}: model_filename must be a str, got {filename!r}")
    parts = filename.split("/")
    if filename and (filename.startswith("/") or "\0" in filename or ".." in parts):
        raise InvalidArgumentError(
            f"Model {shortened(model.name)}: model_filename {shortened(filename)!r} must be a "
            "path inside a version directory"
        )


def _check_policy(name: str, policy: ServableVersionPolicy) -> None:
    if not isinstance(policy, ServableVersionPolicy):
        raise TypeError(f"Model {name}: version_policy must be a ServableVersionPolicy")
    if policy.kind is VersionPolicyKind.LATEST and policy.num_versions > _UINT32_MAX:
        raise InvalidArgumentError(
            f"Model {name}: num_versions {policy.num_versions} does not fit in uint32"
        )
    too_big = sorted(v for v in policy.versions if v > _INT64_MAX)
    if too_big:
        raise InvalidArgumentError(f"Model {name}: versions {too_big} do not fit in int64")


def _check_label(name: str, label: object, version: object) -> None:
    if not isinstance(label, str):
        raise TypeError(f"Model {name}: a version label must be a str, got {label!r}")
    if isinstance(version, bool) or not isinstance(version, int):
        raise TypeError(f"Model {name}: version label {label!r} maps to {version!r}, not an int")
    if not _LABEL.fullmatch(label):
        raise InvalidArgumentError(
            f"Model {name}: invalid version label {label!r}: a label is non-empty and contains "
            "neither '/' nor ':'"
        )
    if not 0 <= version <= _INT64_MAX:
        raise InvalidArgumentError(
            f"Model {name}: version label {label!r} points at version {version}; a version is "
            "an int64 >= 0"
        )


@final
@attrs.frozen
class ModelServerConfig:
    """The models to serve (TF Serving's ``ModelServerConfig`` with a ``model_config_list``).

    A config is a complete desired state: a server given it serves exactly
    these models.  Build it from :class:`ModelConfig` objects, or read TF
    Serving's text format with :func:`parse_model_server_config` /
    :func:`read_model_server_config`.  Raises InvalidArgumentError when two
    models share a name.  Immutable, so thread-safe.
    """

    models: tuple[ModelConfig, ...] = attrs.field(default=(), converter=_models)
    _by_name: Mapping[str, ModelConfig] = attrs.field(init=False, eq=False, hash=False, repr=False)

    def __attrs_post_init__(self) -> None:
        by_name: dict[str, ModelConfig] = {}
        for model in self.models:
            if not isinstance(model, ModelConfig):
                raise TypeError(f"models must be ModelConfig objects, got {model!r}")
            if model.name in by_name:
                # TF Serving's message (server_core.cc ValidateModelConfigList).
                raise InvalidArgumentError(
                    f"Illegal to list model {shortened(model.name)} multiple times in config list"
                )
            by_name[model.name] = model
        object.__setattr__(self, "_by_name", by_name)

    @property
    def names(self) -> tuple[str, ...]:
        """The models' names, in config order."""
        return tuple(model.name for model in self.models)

    def model(self, name: str) -> ModelConfig | None:
        """The model called ``name``, or None if the config does not list it."""
        return self._by_name.get(name)

    def with_model(self, model: ModelConfig) -> ModelServerConfig:
        """This config with ``model`` added, or replacing the model of the same name in place."""
        if model.name not in self._by_name:
            return ModelServerConfig((*self.models, model))
        return ModelServerConfig(model if m.name == model.name else m for m in self.models)

    def without_model(self, name: str) -> ModelServerConfig:
        """This config without the model called ``name`` (unchanged if it has none)."""
        if name not in self._by_name:
            return self
        return ModelServerConfig(m for m in self.models if m.name != name)

    def resolve_base_paths(self, base_dir: str | os.PathLike[str]) -> ModelServerConfig:
        """This config with relative base paths joined to ``base_dir`` (made absolute).

        Absolute paths and URIs are unchanged.
        """
        return ModelServerConfig(model.resolve_base_path(base_dir) for model in self.models)

    def to_proto(self) -> config_pb2.ModelServerConfig:
        """The ``ModelServerConfig`` message, with ``model_config_list`` set (even if empty)."""
        from servinglib.protos import model_server_config_pb2 as config_pb2

        message = config_pb2.ModelServerConfig()
        message.model_config_list.SetInParent()
        message.model_config_list.config.extend(model.to_proto() for model in self.models)
        return message

    def to_text(self) -> str:
        """TF Serving's text format, as a ``models.config`` file holds it."""
        from google.protobuf import text_format

        return text_format.MessageToString(self.to_proto())

    @classmethod
    def from_proto(
        cls, message: pb_message.Message, *, base_dir: str | os.PathLike[str] | None = None
    ) -> ModelServerConfig:
        """A ``ModelServerConfig`` message (ours or TF Serving's) as a ModelServerConfig.

        Relative base paths are joined to ``base_dir`` when it is given, else
        kept.  Raises UnimplementedError for ``custom_model_config``,
        InvalidArgumentError when neither ``model_config_list`` nor
        ``custom_model_config`` is set, or as :meth:`ModelConfig.from_proto`
        and the constructor do.
        """
        from servinglib.protos import model_server_config_pb2 as config_pb2

        ours = as_ours(message, config_pb2.ModelServerConfig, _TF_SERVING_CONFIG)
        choice = ours.WhichOneof("config")
        if choice == "custom_model_config":
            raise UnimplementedError(
                "custom_model_config is not supported: servinglib serves models listed in a "
                "model_config_list"
            )
        if choice is None:
            raise InvalidArgumentError(
                "The model server config sets no model_config_list (is the file empty or "
                "unfinished?); to serve no models, write: model_config_list {}"
            )
        config = cls(ModelConfig.from_proto(model) for model in ours.model_config_list.config)
        return config if base_dir is None else config.resolve_base_paths(base_dir)


def parse_model_server_config(
    text: str, *, base_dir: str | os.PathLike[str] | None = None
) -> ModelServerConfig:
    """Parses TF Serving's text-format ``ModelServerConfig``.

    Relative base paths are joined to ``base_dir`` (made absolute) when it is
    given, else kept relative for the caller (a ServerCore) to resolve.
    Raises InvalidArgumentError for a syntax error, an unknown field name or
    a field given twice, quoting the parser with line and column; for a text
    that sets nothing (an empty or unfinished file); and as
    :meth:`ModelServerConfig.from_proto` does.
    """
    return _parse(text, base_dir=base_dir, source="")


def read_model_server_config(
    path: str | os.PathLike[str],
    *,
    base_dir: str | os.PathLike[str] | None = None,
    content: bytes | None = None,
) -> ModelServerConfig:
    """Reads a ``models.config`` file (TF Serving's text format; UTF-8).

    Relative base paths are joined to ``base_dir`` (default: the file's
    directory).  ``content``: the file's bytes, when the caller has read them
    already.  Raises NotFoundError for a missing file, PermissionDeniedError
    for an unreadable one, UnavailableError for other I/O errors, and
    otherwise as :func:`parse_model_server_config` does, naming the file.
    """
    path = os.fspath(path)
    if content is None:
        content = read_bytes(path, "model config")
    text = decode_text(content, path, "model config")
    if base_dir is None:
        base_dir = os.path.dirname(os.path.abspath(path))
    return _parse(text, base_dir=base_dir, source=path)


def _parse(text: str, *, base_dir: str | os.PathLike[str] | None, source: str) -> ModelServerConfig:
    from servinglib.protos import model_server_config_pb2 as config_pb2

    message = parse_text(text, config_pb2.ModelServerConfig(), "model server config", source)
    try:
        return ModelServerConfig.from_proto(message, base_dir=base_dir)
    except (InvalidArgumentError, UnimplementedError) as error:
        if not source:
            raise
        raise type(error)(f"Invalid model server config in {source}: {error.message}") from None


def _is_relative(path: str) -> bool:
    return not os.path.isabs(path) and not _URI.match(path)
