"""Errors answered below the app's own handlers, in JSON like every other error of the API.

Starlette answers some errors itself, in plain text: 413 from a route's body limit, 400 from the host check
(`TrustedHostMiddleware`), 416 from a file's range past its end (`FileResponse`). A client of ``/api`` and
``/entries`` reads every error as ``{"error": ...}``: these broke that. The page's answers, made for a
browser, are left as they are.
"""

from __future__ import annotations

import json
from http import HTTPStatus

JSON_PATHS = ("/api/", "/entries")


class JsonErrors:
    """ASGI middleware: a plain-text error response under `JSON_PATHS` is sent as ``{"error": "TEXT: METHOD
    PATH"}``, its other headers (``Allow``, ``Content-Range``) kept."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].startswith(JSON_PATHS):
            return await self.app(scope, receive, send)
        held: dict = {}  # the start of a plain-text error, and its body so far

        async def as_json(message):
            if message["type"] == "http.response.start" and message["status"] >= 400 and _plain(message):
                held.update(start=message, body=b"")
                return
            if message["type"] != "http.response.body" or not held:
                return await send(message)
            held["body"] += message.get("body", b"")
            if message.get("more_body"):
                return
            start = held["start"]
            text = held["body"].decode("utf-8", "replace").strip() or HTTPStatus(start["status"]).phrase
            body = json.dumps({"error": f"{text}: {scope['method']} {scope['path']}"}).encode()
            headers = [(k, v) for k, v in start["headers"] if k.lower() not in (b"content-type", b"content-length")]
            headers += [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
            await send({**start, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, as_json)


def _plain(start: dict) -> bool:
    """A response of no type, or text/plain: Starlette's own errors."""
    kind = dict((k.lower(), v) for k, v in start.get("headers", [])).get(b"content-type", b"")
    return kind == b"" or kind.startswith(b"text/plain")
