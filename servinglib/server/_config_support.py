"""The helpers of servinglib.server.config: proto conversion, frozen labels, warn-once.

Private: servinglib.server.config is the API.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, TypeVar, final

from servinglib.errors import InvalidArgumentError
from servinglib.sources.version_policy import ServableVersionPolicy, VersionPolicyKind

if TYPE_CHECKING:
    from google.protobuf import message as pb_message

    from servinglib.protos import file_system_storage_path_source_pb2 as fs_pb2
    from servinglib.protos import model_server_config_pb2 as config_pb2

from servinglib.loaders.registry import DEFAULT_MODEL_PLATFORM

_log = logging.getLogger("servinglib.server.config")


M = TypeVar("M", bound="pb_message.Message")


def as_ours(message: pb_message.Message, ours: type[M], official_name: str) -> M:
    """``message`` as our class: itself, or TF Serving's message re-read from its bytes."""
    if isinstance(message, ours):
        return message
    if message.DESCRIPTOR.full_name == official_name:
        return ours.FromString(message.SerializeToString())
    raise TypeError(f"expected a {ours.DESCRIPTOR.name} message, got {type(message).__name__}")


def platform_of(message: config_pb2.ModelConfig) -> str:
    """The model's platform, from model_platform or the deprecated model_type."""
    from servinglib.protos import model_server_config_pb2 as config_pb2

    name = message.name
    if message.model_type == config_pb2.MODEL_TYPE_UNSPECIFIED:
        return message.model_platform or DEFAULT_MODEL_PLATFORM
    if message.model_platform:
        # TF Serving's message (server_core.cc GetPlatform).
        raise InvalidArgumentError(
            f"Model {name}: illegal setting both model_type (deprecated) and model_platform"
        )
    if message.model_type != config_pb2.TENSORFLOW:
        raise InvalidArgumentError(
            f"Model {name}: model_type {_model_type_name(message.model_type)} is not supported; "
            'set model_platform (e.g. "tensorflow") instead'
        )
    warn_once(
        ("model_type", name),
        f'Model {name}: model_type is deprecated; use model_platform: "tensorflow"',
    )
    return "tensorflow"


def _model_type_name(value: int) -> str:
    from servinglib.protos import model_server_config_pb2 as config_pb2

    try:
        return config_pb2.ModelType.Name(value)
    except ValueError:
        return str(value)


def policy_from_proto(
    message: fs_pb2.FileSystemStoragePathSourceConfig.ServableVersionPolicy,
) -> ServableVersionPolicy:
    choice = message.WhichOneof("policy_choice")
    if choice == "all":
        return ServableVersionPolicy.all()
    if choice == "specific":
        return ServableVersionPolicy.specific(message.specific.versions)
    # Unset or latest; num_versions 0 means 1 (as in TF Serving's file-system source).
    return ServableVersionPolicy.latest(max(message.latest.num_versions, 1))


def policy_to_proto(
    policy: ServableVersionPolicy,
    message: fs_pb2.FileSystemStoragePathSourceConfig.ServableVersionPolicy,
) -> None:
    if policy.kind is VersionPolicyKind.ALL:
        message.all.SetInParent()
    elif policy.kind is VersionPolicyKind.SPECIFIC:
        message.specific.versions.extend(sorted(policy.versions))
    else:
        message.latest.num_versions = policy.num_versions


# -- helpers ----------------------------------------------------------------------------


@final
class FrozenLabels(Mapping[str, int]):
    """A read-only, hashable label → version mapping, sorted by label.

    Immutable, so thread-safe.
    """

    __slots__ = ("_items",)

    def __init__(self, labels: Mapping[str, int]) -> None:
        if not isinstance(labels, Mapping):
            raise TypeError(f"version_labels must be a mapping, got {labels!r}")
        self._items = dict(sorted(labels.items(), key=_label_sort_key))

    def __getitem__(self, label: str) -> int:
        return self._items[label]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(frozenset(self._items.items()))

    def __eq__(self, other: object) -> bool:
        # Fast path of Mapping.__eq__ (which builds two dicts): configs are diffed per reload.
        if isinstance(other, FrozenLabels):
            return self._items == other._items
        return super().__eq__(other)

    def __repr__(self) -> str:
        return repr(self._items)


def _label_sort_key(item: tuple[object, object]) -> str:
    return str(item[0])


warned: set[tuple[str, str]] = set()  # guarded by: warned_lock
warned_lock = threading.Lock()


def warn_once(key: tuple[str, str], message: str) -> None:
    """Logs ``message`` as a warning the first time ``key`` is seen in this process."""
    with warned_lock:
        if key in warned:
            return
        warned.add(key)
    _log.warning("%s", message)
