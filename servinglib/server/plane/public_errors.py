"""PublicErrors: an error as a client sees it, with the server's own directories left out."""

from __future__ import annotations

import os
import re
from typing import TYPE_CHECKING, Final, final

from servinglib.errors import ServingError
from servinglib.sources.remote_mirror import default_cache_dir

if TYPE_CHECKING:
    from servinglib.server.config import ModelServerConfig
    from servinglib.server.server_core import ServerCore

_PATH: Final = re.compile(r"/[^\s'\"(),;:]+")
MODEL_CACHE_LABEL: Final = "<model cache>"


@final
class PublicErrors:
    """Rewrites errors and texts for clients (see the module docstring).

    ``show_paths``: the operator opted in; everything passes unchanged.
    Thread-safe: the table of directories is rebuilt, whole, when the
    core's config object changes.
    """

    def __init__(self, core: ServerCore, *, show_paths: bool = False) -> None:
        self._core = core
        self._show_paths = show_paths
        self._roots: tuple[ModelServerConfig | None, dict[str, str]] = (None, {})

    def error(self, error: ServingError) -> ServingError:
        """``error``, or one of its class with the public text (its cause: ``error``)."""
        message = self.text(error.message)
        if message == error.message:
            return error
        public = ServingError.from_code(error.code, message)
        public.__cause__ = error
        return public

    def text(self, text: str) -> str:
        """``text`` with the server's directories replaced, unless paths are shown."""
        if self._show_paths or "/" not in text:
            return text
        roots = self._current_roots()

        def replace(match: re.Match[str]) -> str:
            token = match.group(0)
            parts = token.split("/")
            for end in range(len(parts), 1, -1):
                label = roots.get("/".join(parts[:end]))
                if label is not None:
                    return label + token[len("/".join(parts[:end])) :]
            return token

        return _PATH.sub(replace, text)

    def _current_roots(self) -> dict[str, str]:
        config = self._core.config
        known, roots = self._roots
        if known is config:
            return roots
        roots = {
            os.path.normpath(model.base_path): f"<{model.name}>"
            for model in config.models
            if os.path.isabs(model.base_path)
        }
        cache = self._core.options.source.model_cache_dir or default_cache_dir()
        roots[os.path.normpath(cache)] = MODEL_CACHE_LABEL
        self._roots = (config, roots)
        return roots
