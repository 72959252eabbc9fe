"""Status conditions (``metav1.Condition`` as dicts), with apimachinery's
``meta.SetStatusCondition`` semantics::

    ready = conditions.new("Ready", False, "Progressing", "1/2 replicas ready", observed_generation=3)
    if conditions.set(status.setdefault("conditions", []), ready):
        ...  # changed: write the status
"""

from __future__ import annotations

import time
from typing import Optional

_KEPT_FIELDS = ("reason", "message", "observedGeneration")


def now() -> str:
    """The current time in RFC 3339, whole seconds, UTC (as the API server
    stores ``metav1.Time``)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(time.time())))


def new(type: str, status: bool, reason: str, message: str, observed_generation: Optional[int] = None) -> dict:
    """A condition of type ``type`` with status ``"True"``/``"False"``,
    ``reason`` (CamelCase) and ``message``, its ``lastTransitionTime`` now;
    ``observedGeneration`` only if given."""
    condition = {
        "type": type,
        "status": "True" if status else "False",
        "reason": reason,
        "message": message,
        "lastTransitionTime": now(),
    }
    if observed_generation is not None:
        condition["observedGeneration"] = observed_generation
    return condition


def set(conditions: list, condition: dict) -> bool:  # noqa: A001 - mirrors the Rust SDK
    """Sets ``condition`` in ``conditions`` (in place), replacing the one of
    the same type.

    ``lastTransitionTime`` only moves when the status changes: an existing
    condition with the same status keeps its time, while its reason, message
    and observedGeneration are updated (an absent observedGeneration removes
    it). Returns True if anything other than a kept time changed (that is,
    whether the status needs writing).
    """
    existing = get(conditions, condition["type"])
    if existing is None:
        conditions.append(dict(condition))
        return True
    changed = False
    if existing.get("status") != condition.get("status"):
        existing["status"] = condition.get("status")
        existing["lastTransitionTime"] = condition.get("lastTransitionTime")
        changed = True
    for field in _KEPT_FIELDS:
        value = condition.get(field)
        if existing.get(field) != value:
            if value is None:
                existing.pop(field, None)
            else:
                existing[field] = value
            changed = True
    return changed


def get(conditions: Optional[list], type: str) -> Optional[dict]:
    """The condition of type ``type``, if any."""
    return next((c for c in conditions or [] if c.get("type") == type), None)


def is_true(conditions: Optional[list], type: str) -> bool:
    """True if the condition of type ``type`` exists with status ``"True"``."""
    c = get(conditions, type)
    return c is not None and c.get("status") == "True"


def remove(conditions: list, type: str) -> bool:
    """Removes the condition of type ``type`` (in place); True if there was one."""
    before = len(conditions)
    conditions[:] = [c for c in conditions if c.get("type") != type]
    return len(conditions) != before
