"""The reconcile's context: deadline, cancellation, attempt, settings."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

from . import _host
from .errors import PermanentError

_UNSET = object()


class Context:
    """The context of one reconcile.

    A new one is made for every reconcile and closed when it returns: using it
    afterwards (say, from a reference kept in a global) raises
    ``RuntimeError`` instead of answering about another reconcile. Nothing
    here is cached across reconciles, so an instance the host reuses for many
    reconciles never sees a stale deadline, attempt or settings.

    The host enforces the deadline (the instance is interrupted once it
    passes); long reconcilers check :meth:`cancelled` and
    :meth:`deadline_remaining` to stop cleanly instead.
    """

    def __init__(self) -> None:
        self._open = True
        self._settings: Any = _UNSET

    def _backend(self):
        if not self._open:
            raise RuntimeError("this Context belongs to a reconcile that has returned")
        return _host.backend()

    def _close(self) -> None:
        self._open = False
        self._settings = _UNSET

    def deadline_remaining(self) -> timedelta:
        """Time left before the host interrupts this reconcile."""
        return timedelta(milliseconds=self._backend().deadline_remaining_ms())

    def deadline_remaining_ms(self) -> int:
        return self._backend().deadline_remaining_ms()

    def cancelled(self) -> bool:
        """True once the host asked this reconcile to stop (shutdown, unload)."""
        return self._backend().cancelled()

    @property
    def attempt(self) -> int:
        """Retries of this key since its last success (0 on the first attempt)."""
        return self._backend().attempt()

    def settings_json(self) -> str:
        """The plugin's ``settings`` from the host config, as JSON text."""
        return self._backend().settings()

    def settings(self) -> Any:
        """The plugin's ``settings``, parsed (``{}`` if none). Invalid JSON is
        a :class:`PermanentError`: retrying cannot fix the config."""
        text = self.settings_json()
        if self._settings is _UNSET:
            try:
                self._settings = json.loads(text)
            except ValueError as e:
                raise PermanentError(f"invalid plugin settings: {e}") from None
        return self._settings
