"""Structured logging into the host's log, inside the reconcile's span.

``wasmctrl_sdk.log.info("created", name=name)``: keyword arguments become
structured fields. Prefer this to ``print``, which reaches the host only as
unstructured stdout lines. :class:`Handler` routes the standard ``logging``
module here too.
"""

from __future__ import annotations

import logging

from . import _host


def log(level: str, message: str, **fields: object) -> None:
    """Log ``message`` at ``level`` (trace, debug, info, warn, error) with
    ``fields`` (values are converted with ``str``)."""
    if level not in ("trace", "debug", "info", "warn", "error"):
        raise ValueError(f"unknown log level {level!r}")
    _host.backend().log(level, str(message), [(str(k), str(v)) for k, v in fields.items()])


def enabled(level: str) -> bool:
    """Whether a message at ``level`` would be kept now (the host's log filter
    lets it through and this reconcile's log budget is not used up): check it
    before building an expensive message. Needs a host of WIT 0.1.1 or later."""
    if level not in ("trace", "debug", "info", "warn", "error"):
        raise ValueError(f"unknown log level {level!r}")
    return bool(_host.backend().log_enabled(level))


def trace(message: str, **fields: object) -> None:
    log("trace", message, **fields)


def debug(message: str, **fields: object) -> None:
    log("debug", message, **fields)


def info(message: str, **fields: object) -> None:
    log("info", message, **fields)


def warn(message: str, **fields: object) -> None:
    log("warn", message, **fields)


def error(message: str, **fields: object) -> None:
    log("error", message, **fields)


class Handler(logging.Handler):
    """A ``logging`` handler that sends records to the host's log:
    ``logging.getLogger().addHandler(wasmctrl_sdk.log.Handler())``."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.levelno >= logging.ERROR:
            level = "error"
        elif record.levelno >= logging.WARNING:
            level = "warn"
        elif record.levelno >= logging.INFO:
            level = "info"
        else:
            level = "debug"
        try:
            log(level, self.format(record), logger=record.name)
        except Exception:
            self.handleError(record)
