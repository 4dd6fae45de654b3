"""How the server's log lines look: ``--log_format=text`` (the default) or ``json``.

JSON lines are for log collectors (Loki, Cloud Logging, Elasticsearch):
one object per line with ``time`` (UTC, ISO 8601), ``level``, ``logger``,
``message``, and, when the line is about a request or a model,
``request_id``, ``model`` and ``version``; a logged exception adds
``traceback``; other fields a line was logged with (the access log's
``api``, ``code``, ``latency_ms``, ...) are added under their names.
"""

from __future__ import annotations

import datetime
import json
import logging
from typing import Any, Final, final

from servinglib.server.plane.request_context import request_id

LOG_FORMATS: Final = ("text", "json")
"""The values of ``--log_format``."""

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
            logging.Formatter(f"%(asctime)s %(levelname)s {whose}%(name)s: %(message)s")
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
