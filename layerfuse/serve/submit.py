"""The client side of the job API, for `extract --server`: queue a job, read it back. Standard
library only, so submitting needs nothing the server needs."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request

from ..errors import LayerfuseError, OptionError

TIMEOUT_S = 60.0  # a submit waits while the server reads the dataset and the model's config


def checked_server(server: str) -> str:
    """``server`` when it is an http(s) URL with a host, else a one-line error saying what is wanted."""
    try:
        parts = urllib.parse.urlsplit(server)
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
        parts.port  # noqa: B018  (raises on a port that is not a number)
    except ValueError:
        ok = False
    if not ok:
        raise OptionError(f"--server wants the server's URL, such as http://gpu-box:8731, not {server!r}")
    return server


def submit_job(server: str, options: dict, *, token: str | None) -> dict:
    """Queue an extraction; the job as the server reports it, with ``joined``."""
    checked_server(server)
    return _call("POST", f"{server.rstrip('/')}/api/jobs", token=token, body=options)


def get_job(server: str, job_id: str, *, token: str | None) -> dict:
    return _call("GET", f"{server.rstrip('/')}/api/jobs/{job_id}", token=token)


def entry_url(server: str, job: dict) -> str:
    return f"{server.rstrip('/')}/entries/{job['entry']}"


def _call(method: str, url: str, *, token: str | None, body: dict | None = None) -> dict:
    headers = {"Accept": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = None
    if body is not None:
        data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S) as response:
            return json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise LayerfuseError(f"the server refused ({exc.code}): {_reason(exc)}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, TimeoutError):  # reached, and still working (a large model folder is hashed first)
            queued = f" (the job may be queued all the same: see {url})" if method == "POST" else ""
            raise LayerfuseError(f"{url} did not answer within {TIMEOUT_S:g} s{queued}") from None
        raise LayerfuseError(f"cannot reach {url}: {reason}") from None
    except ValueError as exc:
        raise LayerfuseError(f"{url} answered something that is not JSON: {exc}") from None


def _reason(exc: urllib.error.HTTPError) -> str:
    """The server's one-line ``{"error": ...}``, else the first line of whatever it sent."""
    text = exc.read().decode("utf-8", "replace")
    try:
        return str(json.loads(text)["error"])
    except (ValueError, KeyError, TypeError):
        return (text.strip().splitlines() or [exc.reason or "no reason given"])[0]
