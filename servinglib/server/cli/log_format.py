"""How the server's log lines look: ``--log_format=text`` (the default) or ``json``."""

from __future__ import annotations

import datetime
import json
import logging
from typing import Any, Final, final

from servinglib.server.observe.request_context import request_id

LOG_FORMATS: Final = ("text", "json")
"""The values of ``--log_format``."""

# C0 controls but tab, DEL, C1 controls, and the Unicode line and paragraph separators.
_ESCAPES: Final = {
    **{code: f"\\x{code:02x}" for code in (*range(0x20), 0x7F, *range(0x80, 0xA0)) if code != 0x09},
    0x0A: "\\n",
    0x0D: "\\r",
    0x2028: "\\u2028",
    0x2029: "\\u2029",
}

# What every LogRecord has: anything else was passed with extra={...}.
_STANDARD: Final = frozenset(logging.makeLogRecord({}).__dict__) | {
    "message",
    "asctime",
    "color_message",  # uvicorn's message with terminal colours
}


@final
class JsonFormatter(logging.Formatter):
    """Formats each record as one JSON object on one line (see the module docstring).

    The request id is the record's ``request_id`` (``extra``), else that of
    the request the logging task serves.
    Thread-safe (no state).
    """

    def format(self, record: logging.LogRecord) -> str:
        """The record as one line of JSON."""
        fields: dict[str, Any] = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        rid = getattr(record, "request_id", None) or request_id()
        if rid is not None:
            fields["request_id"] = rid
        for key, value in record.__dict__.items():
            if key not in _STANDARD and key != "request_id" and value is not None:
                fields[key] = value
        if record.exc_info:
            fields["traceback"] = self.formatException(record.exc_info)
        return json.dumps(fields, default=str, ensure_ascii=False)


def escape_controls(text: str) -> str:
    """``text`` on one line: line breaks as ``\\n``, ``\\r``, other controls as ``\\xNN``."""
    return text.translate(_ESCAPES)


@final
class TextFormatter(logging.Formatter):
    """Formats a record as ``fmt`` says, with its message's control characters escaped.

    A record's traceback (``exc_info``) and stack follow on their own lines.
    Thread-safe (no state but the format).
    """

    def formatMessage(self, record: logging.LogRecord) -> str:  # noqa: N802 - logging's name
        """The line of ``record``, its message on one line (:func:`escape_controls`)."""
        record.message = escape_controls(record.message)
        return super().formatMessage(record)


def configure_logging(level: str, log_format: str, worker: int | None = None) -> None:
    """Sets the root logger up as the server logs: ``level``, ``log_format`` (text or json).

    A ``worker`` process (``--num_workers``) says which it is: text lines
    with ``worker <n>`` before the logger name, JSON lines with ``worker``.
    """
    handler = logging.StreamHandler()
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
        if worker is not None:
            handler.addFilter(_WorkerField(worker))
    else:
        whose = f"worker {worker} " if worker is not None else ""
        handler.setFormatter(
            TextFormatter(f"%(asctime)s %(levelname)s {whose}%(name)s: %(message)s")
        )
    logging.basicConfig(level=level.upper(), handlers=[handler])


@final
class _WorkerField(logging.Filter):
    """Adds ``worker`` to every record the handler writes.  Thread-safe (no state but the id)."""

    def __init__(self, worker: int) -> None:
        super().__init__()
        self._worker = worker

    def filter(self, record: logging.LogRecord) -> bool:
        record.worker = self._worker
        return True
