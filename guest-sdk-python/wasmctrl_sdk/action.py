"""What the host does with the key after a successful reconcile."""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import timedelta
from typing import Union

Delay = Union[timedelta, int, float]


@dataclass(frozen=True)
class Action:
    """controller-runtime's ``Result``.

    :meth:`requeue_after` re-adds the key after a delay (and resets its
    backoff), :meth:`requeue` re-adds it with per-key backoff, and
    :meth:`done` forgets the key until the next watch event.
    """

    requeue_: bool = False
    #: Milliseconds; 0 means none.
    requeue_after_ms: int = 0

    @staticmethod
    def done() -> "Action":
        """The object is in its desired state; wait for the next change."""
        return Action()

    @staticmethod
    def requeue() -> "Action":
        """Reconcile again soon, with per-key exponential backoff."""
        return Action(requeue_=True)

    @staticmethod
    def requeue_after(delay: Delay) -> "Action":
        """Reconcile again after ``delay`` (a ``timedelta`` or seconds); use
        this to wait for something external, never a sleep. A zero delay
        means :meth:`done`; a positive one is at least 1 ms."""
        if isinstance(delay, timedelta):
            micros = delay // timedelta(microseconds=1)
        else:
            seconds = float(delay)
            if math.isnan(seconds) or math.isinf(seconds):
                raise ValueError(f"requeue_after: the delay must be finite, not {delay!r}")
            micros = round(seconds * 1_000_000)
        if micros < 0:
            raise ValueError(f"requeue_after: the delay must be >= 0, not {delay!r}")
        if micros == 0:
            return Action()
        # Whole milliseconds, as the Rust SDK truncates; never 0 for a delay.
        return Action(requeue_after_ms=min(max(micros // 1000, 1), 2**64 - 1))

    @property
    def delay(self) -> timedelta | None:
        """The requeue delay, if any."""
        return timedelta(milliseconds=self.requeue_after_ms) if self.requeue_after_ms else None

    def __repr__(self) -> str:
        if self.requeue_after_ms:
            return f"Action.requeue_after({self.requeue_after_ms / 1000}s)"
        return "Action.requeue()" if self.requeue_ else "Action.done()"
