"""One REST exchange: the decoded request a handler gets and the response it gives back."""

from __future__ import annotations

import abc
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any, final

import attrs

from servinglib.errors import InvalidArgumentError, ServingError, StatusCode, bounded_message
from servinglib.server.model_spec import ModelSpec
from servinglib.server.rest import json_codec

JSON = b"application/json"


@final
@attrs.frozen
class RestRequest:
    """What a handler needs: the path's model selectors, the body, headers and deadline.

    ``model_name`` is URL-decoded; ``version`` and ``label`` are None when
    the path names neither.  ``headers`` are the ASGI headers (lower-case
    names).  ``deadline`` is in ``time.monotonic()`` seconds (None: none).
    ``spec``, when given, is the ModelSpec of those selectors made ahead
    (the router keeps one per route).  ``query``: the raw query string
    (custom HTTP endpoints pass it on).  Immutable, so thread-safe.
    """

    model_name: str
    version: int | None
    label: str | None
    body: bytes
    headers: tuple[tuple[bytes, bytes], ...]
    deadline: float | None
    spec: ModelSpec | None = None
    query: bytes = b""

    def model_spec(self) -> ModelSpec:
        """The ModelSpec the path selects: a version, a label, or the latest."""
        if self.spec is not None:
            return self.spec
        return ModelSpec(self.model_name, self.version, self.label)

    def header(self, name: bytes) -> bytes | None:
        """The value of header ``name`` (lower-case), or None."""
        for key, value in self.headers:
            if key == name:
                return value
        return None

    def json_object(self) -> dict[str, Any]:
        """The body as a JSON object; InvalidArgumentError if it is not one."""
        if not self.body:
            raise InvalidArgumentError("The request body is empty: a JSON object was expected")
        value = json_codec.loads(self.body)
        if not isinstance(value, dict):
            raise InvalidArgumentError("The request body must be a JSON object")
        return value


class BodyStream(abc.ABC):
    """A response body sent in chunks as they come (server-sent events, say).

    The app sends each chunk of :meth:`chunks` as it comes, stops reading
    them when the client disconnects, and always calls :meth:`aclose`
    last.  ``code`` is the outcome for the request's record: OK unless the
    body reported an error in band.
    Not thread-safe: one task sends it.
    """

    def __init__(self) -> None:
        self.code = StatusCode.OK

    @abc.abstractmethod
    def chunks(self) -> AsyncGenerator[bytes, None]:
        """The body's chunks, each sent as soon as it is given."""

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Releases what the body holds; called once, whether or not the chunks were read."""


@final
@attrs.frozen
class RestResponse:
    """A response: status, body, content type and extra headers.  Immutable.

    With ``stream`` the body is sent in chunks from it (``body`` is then
    ignored, and no content length is sent).
    """

    status: int
    body: bytes
    content_type: bytes = JSON
    headers: tuple[tuple[bytes, bytes], ...] = ()
    stream: BodyStream | None = attrs.field(default=None, eq=False)

    @classmethod
    def json(cls, value: Any, status: int = 200) -> RestResponse:  # noqa: ANN401 - any JSON value
        """``value`` written as JSON (orjson; numpy arrays of numbers allowed)."""
        return cls(status, json_codec.dumps(value))

    @classmethod
    def error(cls, error: ServingError) -> RestResponse:
        """``{"error": message}`` with the HTTP status of the error's code.

        The message is cut to MAX_MESSAGE_BYTES (bounded_message), whatever it quotes.
        """
        body = {"error": bounded_message(error.message)}
        return cls(error.code.http_status, json_codec.dumps(body))


Handler = Callable[[RestRequest], Awaitable[RestResponse]]
"""An endpoint: a coroutine from request to response; raises ServingError for failures."""
