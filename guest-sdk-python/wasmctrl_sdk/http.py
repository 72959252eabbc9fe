"""Requests to hosts outside the cluster, over ``wasi:http/outgoing-handler``.

The host sends every request itself, and only where the plugin's
``outbound`` grant in the host config allows. A refused request fails the
whole reconcile with an error naming the rule (or ceiling) it failed;
redirects are not followed (a 3xx is an answer like any other); everything
ends at the reconcile's deadline. A header value may carry
``${secret:NAME}`` (:func:`wasmctrl_sdk.secrets.placeholder`): the host
substitutes the secret toward the secret's hosts only.

::

    from wasmctrl_sdk import http, secrets

    answer = http.get("https://api.example.com/v1/zones")
    if answer.status == 200:
        zones = answer.json()
    put = http.Request("PUT", "https://api.example.com/v1/zones/a",
                       headers=[("authorization", "Bearer " + secrets.placeholder("token"))],
                       body=b'{"ttl": 60}')
    answer = http.send(put)

:class:`HttpError` is a :class:`wasmctrl_sdk.TransientError`: escaping
``reconcile``, it retries the key with backoff. In unit tests,
``FakeCluster.answer_http`` cans answers. Needs a host of WIT 0.1.2 or
later.
"""

from __future__ import annotations

import json as _json
from dataclasses import dataclass, field
from typing import Any, Optional

from . import _host
from .errors import TransientError


class HttpError(TransientError):
    """A request got no answer: a bad URL, a refusal or failure of the host,
    or an answer that broke off; or a body that is not what was expected."""


@dataclass
class Request:
    method: str
    #: An absolute ``http://`` or ``https://`` URL.
    url: str
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""

    def header(self, name: str, value: str) -> "Request":
        self.headers.append((name, value))
        return self


@dataclass
class Response:
    status: int
    headers: list[tuple[str, bytes]] = field(default_factory=list)
    body: bytes = b""

    def header(self, name: str) -> Optional[str]:
        """The first value of header ``name`` (case-insensitive), as text."""
        for n, v in self.headers:
            if n.lower() == name.lower():
                try:
                    return v.decode()
                except UnicodeDecodeError:
                    return None
        return None

    def json(self) -> Any:
        """The body as JSON."""
        try:
            return _json.loads(self.body)
        except ValueError as e:
            raise HttpError(f"HTTP body: {e}") from None


def send(request: Request) -> Response:
    """Sends ``request`` through the host and returns the whole answer."""
    if not (request.url.startswith("https://") or request.url.startswith("http://")):
        raise HttpError(f"bad URL: {request.url!r} must start with https:// or http://")
    return _host.backend().http_send(request)


def get(url: str) -> Response:
    """``GET url``."""
    return send(Request("GET", url))
