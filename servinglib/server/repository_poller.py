"""RepositoryPoller: Triton's poll mode, a model repository's changes applied while serving."""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from typing import final

from servinglib.core.wake_loop import WakeLoop
from servinglib.errors import InvalidArgumentError, ServingError
from servinglib.server.config import ModelConfig, ModelServerConfig
from servinglib.server.server_core import ServerCore
from servinglib.server.triton_repository import RepositoryScan, TritonRepository

_log = logging.getLogger("servinglib.server")


@final
class RepositoryPoller:
    """Looks at a model repository every ``poll_wait_s`` and serves what it holds then.

    A new model directory is loaded, a removed one unloaded, a model whose
    config changed (its ``config.pbtxt``, or its layout) unloaded and loaded
    again (a gap: its versions are known by number, so the new config's
    cannot load beside the old); new versions of a model are its
    file-system source's business, as always.  Only the repository's models
    are touched (:meth:`TritonRepository.owns`): the others of the core's
    config stay, and a repository model named like one of them is not
    served (logged).  A model that cannot be served (a config that does not
    parse, an ensemble, a GPU) is logged once each time its error changes.
    The core is assumed to serve the repository as it is at construction.
    Thread-safe: polls are serialized.
    """

    def __init__(
        self,
        core: ServerCore,
        repository: TritonRepository,
        poll_wait_s: float,
        *,
        start: bool = True,
    ) -> None:
        if poll_wait_s <= 0:
            raise InvalidArgumentError(f"poll_wait_s must be > 0, got {poll_wait_s}")
        self._core = core
        self._repository = repository
        self._poll_wait_s = poll_wait_s
        self._lock = threading.Lock()  # serializes polls
        self._last = _outcome(repository.scan())  # guarded by: _lock
        self._loop = WakeLoop(
            "servinglib-repository-poller",
            self._step,
            what=f"polling the model repository {repository.path}",
            first_wait_s=poll_wait_s,
            after_error_s=poll_wait_s,
        )
        if start:
            self._loop.start()

    def poll_once(self) -> bool:
        """Looks at the repository now and applies what changed; True if anything did.

        Waits for new models as :meth:`ServerCore.reload_config` does; models
        that fail are logged and stay configured, in error.
        """
        with self._lock:
            scan = self._repository.scan()
            outcome = _outcome(scan)
            if outcome == self._last:
                return False
            self._log_errors(scan.errors)
            self._last = outcome
            self._apply(scan.models)
            return True

    def close(self) -> None:
        """Stops polling (after a poll running now); idempotent."""
        self._loop.stop()

    def __enter__(self) -> RepositoryPoller:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _apply(self, models: tuple[ModelConfig, ...]) -> None:
        repository = self._repository
        served = {m.name: m for m in self._core.config.models if repository.owns(m)}
        others = {m.name for m in self._core.config.models if not repository.owns(m)}
        for model in models:
            if model.name in others:
                _log.error(
                    "Model %s of the model repository %s is not served: the model config "
                    "serves a model of that name",
                    model.name,
                    repository.path,
                )
        wanted = [m for m in models if m.name not in others]
        changed = {m.name for m in wanted if m.name in served and served[m.name] != m}
        try:
            if changed:
                _log.info("Model repository: reloading %s", ", ".join(sorted(changed)))
                self._core.update_config(lambda current: self._without(current, changed))
            self._core.update_config(lambda current: repository.with_models(current, wanted))
        except ServingError as error:
            _log.error("Model repository %s: %s", repository.path, error.message)

    def _without(self, current: ModelServerConfig, names: set[str]) -> ModelServerConfig:
        kept = [m for m in current.models if self._repository.owns(m) and m.name not in names]
        return self._repository.with_models(current, kept)

    def _log_errors(self, errors: Mapping[str, ServingError]) -> None:
        before = self._last[1]
        for name, error in sorted(errors.items()):
            if before.get(name) != error.message:
                _log.error("Model %s is not served: %s", name, error.message)

    def _step(self) -> float:
        self.poll_once()
        return self._poll_wait_s


def _outcome(
    scan: RepositoryScan,
) -> tuple[tuple[ModelConfig, ...], Mapping[str, str]]:
    """What a scan found, comparable with another's (errors by their messages)."""
    return scan.models, {name: error.message for name, error in scan.errors.items()}
