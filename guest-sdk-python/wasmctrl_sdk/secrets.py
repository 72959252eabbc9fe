"""Secrets the host holds for the plugin: the ``secrets`` entries of its host
config, each a value (a key of a Kubernetes Secret, a file or an
environment variable) bound to the only destinations it may be sent to.

Use a secret without seeing it: write :func:`placeholder` into an outgoing
request's header value, and the host substitutes the value, only in
requests to the entry's ``hosts``; to any other destination the request is
refused and nothing is sent. Answers come back with the value redacted as
``<secret:NAME>``.

:func:`reveal` returns the value itself, only where the entry says
``reveal: true``. Prefer the placeholder: a value the plugin never holds
cannot leak through it. Needs a host of WIT 0.1.2 or later.
"""

from __future__ import annotations

from . import _host


def placeholder(name: str) -> str:
    """``${secret:NAME}``: what a header value carries for the host to
    replace with secret ``name``'s value."""
    return "${secret:" + name + "}"


def reveal(name: str) -> str:
    """The value of secret ``name``, where its entry says ``reveal: true``.

    Raises :class:`wasmctrl_sdk.Forbidden` without ``reveal: true``,
    :class:`wasmctrl_sdk.NotFound` for a name the plugin's secrets do not
    hold, :class:`wasmctrl_sdk.Unavailable` when the host cannot read the
    value now."""
    return _host.backend().reveal(name)
