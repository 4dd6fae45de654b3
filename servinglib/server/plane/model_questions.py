"""ModelQuestions: what front ends ask about models, answered alike for all of them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, final

import attrs

from servinglib.core.servable_state import ManagerState
from servinglib.errors import DeadlineExceededError, NotFoundError, ServingError
from servinglib.server.model_spec import ModelSpec
from servinglib.server.observe.statistics import InferenceStatistics, VersionStatistics
from servinglib.server.plane.metadata import (
    v2_config_data_type,
    v2_decoupled,
    v2_model_metadata,
)
from servinglib.server.plane.public_errors import PublicErrors
from servinglib.server.plane.repository_index import RepositoryEntry, repository_index
from servinglib.server.plane.version_choice import with_traffic_status
from servinglib.server.server_core import ServerCore
from servinglib.server.status import ModelMetadata, ModelStatus

Overdue = Callable[[], dict[tuple[str, int], int]]
"""Calls running past their deadline now, by model name and version."""


@final
@attrs.frozen
class ModelReadiness:
    """Whether a model (or one version of it) can serve now, and why not.  Immutable.

    ``error`` says why not: NotFoundError for a model or version this
    server does not know, InvalidArgumentError for an unknown label,
    UnavailableError or NotFoundError (naming the load's error) for a
    version loading or failed.
    """

    name: str
    ready: bool
    error: ServingError | None = None


@final
class ModelQuestions:
    """Answers questions about a ServerCore's models for every front end alike.

    ``statistics``: the requests the plane counted (Triton's statistics);
    ``overdue``: its calls running past their deadline, which
    :meth:`model_status` reports as the version's error.  ``starved``: True
    while no model call can find a worker (every one held by a call past its
    deadline); the server is not ready then.  Thread-safe.
    """

    def __init__(
        self,
        core: ServerCore,
        statistics: InferenceStatistics,
        overdue: Overdue,
        starved: Callable[[], bool] = lambda: False,
        public: PublicErrors | None = None,
    ) -> None:
        self._core = core
        self._statistics = statistics
        self._overdue = overdue
        self._starved = starved
        self._public = PublicErrors(core) if public is None else public

    def public_error(self, error: ServingError) -> ServingError:
        """``error`` as a client may read it: the server's directories left out (PublicErrors)."""
        return self._public.error(error)

    def server_live(self) -> bool:
        """True: the process answers (liveness says nothing about models)."""
        return True

    def server_ready(self) -> bool:
        """Whether every configured model has an available version (:meth:`ServerCore.ready`)
        and a model call can find a worker (not all held by calls past their deadline)."""
        return self._core.ready() and not self._starved()

    def list_models(self) -> list[str]:
        """The configured models' names, sorted."""
        return self._core.list_models()

    def model_ready(self, model_spec: ModelSpec) -> ModelReadiness:
        """Whether the version ``model_spec`` selects (number, label, or any) serves now."""
        try:
            self._core.resolve_version(model_spec)
        except ServingError as error:
            return ModelReadiness(model_spec.name, False, self._public.error(error))
        return ModelReadiness(model_spec.name, True)

    def repository_index(self, *, ready_only: bool = False) -> list[RepositoryEntry]:
        """Every model the core has served, each version with its state (Triton's index)."""
        return repository_index(self._core, ready_only=ready_only)

    def label_version(self, name: str, label: str) -> int:
        """The version ``label`` of ``name`` names (:meth:`ServerCore.label_version`)."""
        return self._core.label_version(name, label)

    def resolve_version(self, model_spec: ModelSpec) -> int:
        """The version ``model_spec`` selects now, to pin several calls to one (MultiInference)."""
        return self._core.resolve_version(model_spec)

    def model_metadata(self, model_spec: ModelSpec) -> ModelMetadata:
        """The platform and signatures of the version ``model_spec`` selects."""
        return self._core.model_metadata(model_spec)

    def v2_model_metadata(self, model_spec: ModelSpec) -> dict[str, Any]:
        """KServe V2 model metadata (:func:`v2_model_metadata`): every available version."""
        metadata = self._core.model_metadata(model_spec)
        return v2_model_metadata(
            metadata.name,
            self._available_versions(metadata),
            metadata.platform,
            metadata.signatures,
        )

    def v2_model_config(self, model_spec: ModelSpec) -> dict[str, Any]:
        """Triton's model configuration of the selected version, as its JSON object.

        A model configured from a Triton ``config.pbtxt``: that config as read and
        completed, printed as Triton prints it (:func:`model_config_json`).  Any other:
        one made from its metadata, ``platform`` and ``backend`` both naming its
        platform, the default signature's tensors (``data_type`` as ``TYPE_FP32``),
        ``model_transaction_policy.decoupled`` saying whether it streams (as a Triton
        decoupled model, read by clients such as perf_analyzer).
        """
        metadata = self._core.model_metadata(model_spec)
        model = self._core.config.model(metadata.name)
        if model is not None and model.triton_config is not None:
            from servinglib.codecs.model_config_json import model_config_json  # protobuf

            return model_config_json(model.triton_config.message)
        summary = v2_model_metadata(
            metadata.name, [metadata.version], metadata.platform, metadata.signatures
        )
        return {
            "name": metadata.name,
            "platform": metadata.platform,
            "backend": metadata.platform,
            "max_batch_size": 0,
            "input": [_config_tensor(t) for t in summary["inputs"]],
            "output": [_config_tensor(t) for t in summary["outputs"]],
            "model_transaction_policy": {"decoupled": v2_decoupled(metadata.signatures)},
        }

    def model_status(self, model: str | ModelSpec, version: int | None = None) -> ModelStatus:
        """Every version of a model (or the one ``version`` or a spec's label names).

        :meth:`ServerCore.model_status`, with versions that have overdue calls
        flagged: a version whose calls run past their deadline (they hold
        workers of its model's share) carries a DEADLINE_EXCEEDED error
        saying how many.  A label names its version whatever that version's
        state (InvalidArgumentError for an unknown label).
        """
        if isinstance(model, ModelSpec):
            name = model.name
            if model.version_label is not None:
                version = self._core.label_version(name, model.version_label)
            elif model.version is not None:
                version = model.version
        else:
            name = model
        status = self._core.model_status(name, version)
        if version is None and (config := self._core.config.model(name)) is not None:
            status = with_traffic_status(status, config.traffic)
        overdue = self._overdue()
        if all(v.error is None for v in status.versions) and not any(
            model == name for model, _ in overdue
        ):
            return status  # the usual answer: nothing to flag or rewrite
        versions = tuple(
            attrs.evolve(v, error=_overdue_error(count))
            if v.error is None and (count := overdue.get((name, v.version), 0))
            else v
            if v.error is None
            else attrs.evolve(v, error=self._public.error(v.error))
            for v in status.versions
        )
        return attrs.evolve(status, versions=versions)

    def model_statistics(
        self, name: str | None = None, version: int | None = None
    ) -> list[VersionStatistics]:
        """Triton's statistics of every version (``name`` None), a model's, or one version's.

        A model's versions are those available now and those counted
        before (versions since unloaded keep their statistics).  Raises
        NotFoundError for a model this server does not know, or a version
        of it that is neither available nor counted.
        """
        if name is None:
            keys = {key for model in self._core.list_models() for key in self._versions_of(model)}
            keys.update(
                (model, counted)
                for model in self._core.list_models()
                for counted in self._statistics.versions(model)
            )
            return self._statistics.snapshot(keys)
        keys = self._versions_of(name)
        keys.update((name, counted) for counted in self._statistics.versions(name))
        if version is not None:
            if (name, version) not in keys:
                raise NotFoundError(
                    f"Model {name} has no version {version} serving or with statistics"
                )
            keys = {(name, version)}
        return self._statistics.snapshot(keys)

    def _versions_of(self, name: str) -> set[tuple[str, int]]:
        """``name``'s available versions (NotFoundError for a model the core does not know)."""
        status = self._core.model_status(name)
        return {(name, v.version) for v in status.versions if v.state is ManagerState.AVAILABLE}

    def _available_versions(self, metadata: ModelMetadata) -> list[int]:
        status = self._core.model_status(metadata.name)
        available = {v.version for v in status.versions if v.state is ManagerState.AVAILABLE}
        return sorted(available | {metadata.version})


def _config_tensor(tensor: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": tensor["name"],
        "data_type": v2_config_data_type(tensor["datatype"]),
        "dims": tensor["shape"],
    }


def _overdue_error(count: int) -> DeadlineExceededError:
    return DeadlineExceededError(
        f"{count} call(s) still running past their deadline, each holding a worker of this "
        "model's share until it returns"
    )
