"""Errors: why a reconcile failed, and why a call to the API failed.

A reconcile fails by raising. :class:`TransientError` is retried with per-key
exponential backoff; :class:`PermanentError` is not retried and is recorded
as a terminal error until the object changes again. An :class:`ApiError`
that escapes ``reconcile`` counts as transient, except ``Invalid``,
``Forbidden`` and ``Serialization``, which are permanent: retrying the same
call cannot help (the Rust SDK's ``From<ApiError> for Error``).
"""

from __future__ import annotations


class ReconcileError(Exception):
    """A failed reconcile; see :class:`TransientError` and :class:`PermanentError`."""

    #: True if retrying cannot help.
    permanent: bool = False

    def __init__(self, message: str):
        super().__init__(message)
        self.message = str(message)

    @staticmethod
    def of(error: BaseException) -> "ReconcileError":
        """The reconcile error an exception escaping ``reconcile`` becomes:
        itself, an :class:`ApiError` by the transient/permanent rule, or
        anything else as transient."""
        if isinstance(error, ReconcileError):
            return error
        if isinstance(error, ApiError):
            return error.to_reconcile_error()
        return TransientError(f"unexpected {type(error).__name__}: {error}")

    def __str__(self) -> str:
        return f"{'permanent' if self.permanent else 'transient'}: {self.message}"


class TransientError(ReconcileError):
    """A failure worth retrying (a conflict, an unavailable API server, …)."""

    permanent = False


class PermanentError(ReconcileError):
    """A failure retrying cannot fix (an invalid spec, …)."""

    permanent = True


class ApiError(Exception):
    """A failed call to the Kubernetes API through the host.

    Subclasses name the cause; ``code`` is the short name the host's metrics
    use and ``message`` the human-readable text.
    """

    code = "other"
    #: Whether a reconcile failing with this error should not be retried.
    permanent = False

    def __init__(self, message: str):
        super().__init__(message)
        self.message = str(message)

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    def to_reconcile_error(self) -> ReconcileError:
        cls = PermanentError if self.permanent else TransientError
        return cls(str(self))


class NotFound(ApiError):
    """The object (or its namespace) does not exist (HTTP 404)."""

    code = "not-found"


class Conflict(ApiError):
    """A write lost a race: stale ``resourceVersion``, or a server-side apply
    field conflict without ``force`` (HTTP 409)."""

    code = "conflict"


class AlreadyExists(ApiError):
    """``create`` of a name that is taken (HTTP 409)."""

    code = "already-exists"


class Forbidden(ApiError):
    """The plugin's permission grant (or the API server) does not allow the call."""

    code = "forbidden"
    permanent = True


class Invalid(ApiError):
    """The API server rejected the object or patch (HTTP 422/400), including a
    failed JSON-patch ``test`` operation."""

    code = "invalid"
    permanent = True


class Timeout(ApiError):
    """The reconcile's deadline ran out during the call."""

    code = "timeout"


class Unavailable(ApiError):
    """The host cannot reach an API server."""

    code = "unavailable"


class Other(ApiError):
    """Anything else the host or API server reported."""

    code = "other"


class Serialization(ApiError):
    """JSON crossing the boundary is not what it should be: a reply that is
    not a JSON object, or a body that cannot be serialized. Raised by the
    SDK, not by the host."""

    code = "serialization"
    permanent = True


#: Every error the host can report, by its WIT case name.
BY_CODE: dict[str, type[ApiError]] = {
    cls.code: cls
    for cls in (NotFound, Conflict, AlreadyExists, Forbidden, Invalid, Timeout, Unavailable, Other)
}
