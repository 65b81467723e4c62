"""The processes' log lines, written one way for the gateway and the workers: text (the default,
``time LEVEL logger message``) or, with ``LLMGW_LOG_FORMAT=json``, one JSON object per line for log
collectors (Loki, Elasticsearch, Cloud Logging) with the request id and trace id as fields where a line
carries them (``request_id=...``, ``trace_id=...`` in the message, as the gateway writes them).
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
from datetime import UTC, datetime
from typing import TextIO

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
FORMATS = ("text", "json")
FIELDS = re.compile(r"\b(request_id|trace_id)=([^\s,;]+)")
"""The ids a message carries that become fields of their own in JSON."""


class JsonFormatter(logging.Formatter):
    """One JSON object per record: ``time`` (UTC, ISO 8601), ``level``, ``logger``, ``message``, the
    ``request_id`` and ``trace_id`` the message names, and ``exception`` (the traceback) when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        message = record.getMessage()
        out: dict[str, str] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": message,
        }
        out.update(FIELDS.findall(message))
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        elif record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False)


def log_format(given: str | None = None) -> str:
    """``given``, else ``LLMGW_LOG_FORMAT``, else ``text``; ValueError for another value."""
    value = (given if given is not None else os.environ.get("LLMGW_LOG_FORMAT", "")).strip().lower() or "text"
    if value not in FORMATS:
        raise ValueError(f"LLMGW_LOG_FORMAT must be text or json, not {value!r}")
    return value


def configure_logging(
    level: int | str = logging.INFO, fmt: str | None = None, stream: TextIO | None = None
) -> None:
    """The root logger's one handler on ``stream`` (stdout) in the chosen format (see :func:`log_format`)."""
    handler = logging.StreamHandler(stream or sys.stdout)
    if log_format(fmt) == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(LOG_FORMAT))
    logging.basicConfig(level=level, handlers=[handler], force=True)
