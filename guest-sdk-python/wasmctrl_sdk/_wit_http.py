"""``http.send`` inside a component: the request built, sent and read through
``wasi:http/outgoing-handler`` as componentize-py binds it (the
``http-reconciler`` world). Importing this module natively fails.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from componentize_py_types import Err
from wit_world.imports import outgoing_handler, streams
from wit_world.imports import wasi_http_types as t

from .http import HttpError, Request, Response

#: Bytes one ``blocking-write-and-flush`` may take (the wasi:io contract).
_WRITE_CHUNK = 4096
_READ_CHUNK = 64 << 10

_METHODS = {
    "GET": t.Method_Get(),
    "HEAD": t.Method_Head(),
    "POST": t.Method_Post(),
    "PUT": t.Method_Put(),
    "DELETE": t.Method_Delete(),
    "CONNECT": t.Method_Connect(),
    "OPTIONS": t.Method_Options(),
    "TRACE": t.Method_Trace(),
    "PATCH": t.Method_Patch(),
}


def _failed(what: str, e: BaseException) -> HttpError:
    value = e.value if isinstance(e, Err) else e
    return HttpError(f"HTTP request failed: {what}: {value}")


def send(request: Request) -> Response:
    parts = urlsplit(request.url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    try:
        headers = t.Fields.from_list([(n, v.encode()) for n, v in request.headers])
    except Err as e:
        raise _failed("headers", e) from None
    outgoing = t.OutgoingRequest(headers)
    outgoing.set_method(_METHODS.get(request.method.upper(), t.Method_Other(request.method)))
    outgoing.set_scheme(t.Scheme_Https() if parts.scheme == "https" else t.Scheme_Http())
    outgoing.set_authority(parts.netloc)
    outgoing.set_path_with_query(path)
    body = outgoing.body()
    try:
        future = outgoing_handler.handle(outgoing, None)
    except Err as e:
        raise _failed(f"{request.method} {request.url}", e) from None
    try:
        stream = body.write()
        data = request.body
        for i in range(0, len(data), _WRITE_CHUNK):
            stream.blocking_write_and_flush(data[i : i + _WRITE_CHUNK])
        stream.__exit__(None, None, None)
        t.OutgoingBody.finish(body, None)
    except Err as e:
        raise _failed("sending the body", e) from None
    future.subscribe().block()
    got = future.get()
    if got is None or isinstance(got, Err) or isinstance(got.value, Err):
        inner = got.value.value if got is not None and not isinstance(got, Err) else got
        raise HttpError(f"HTTP request failed: {request.method} {request.url}: {inner}")
    incoming = got.value.value
    status = incoming.status()
    response_headers = incoming.headers().entries()
    incoming_body = incoming.consume()
    stream = incoming_body.stream()
    chunks = []
    while True:
        try:
            chunks.append(stream.blocking_read(_READ_CHUNK))
        except Err as e:
            if isinstance(e.value, streams.StreamError_Closed):
                break
            raise _failed("reading the body", e) from None
    return Response(status, list(response_headers), b"".join(chunks))
