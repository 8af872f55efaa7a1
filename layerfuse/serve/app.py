"""The ASGI application: one Starlette app assembling the routes of each part.

- `entries`: complete entries as read-only files under ``/entries/<name>/...`` (range requests)
  and the JSON API over them (``/api/entries``, ``/api/entries/<name>``);
- `jobs`: the extraction queue (``POST /api/jobs``, ``GET /api/jobs``, ``GET /api/jobs/<id>``);
- `page`: the web page at ``/`` and the run reports it links to.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from pathlib import Path

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.responses import JSONResponse

from . import entries, jobs, page
from .guard import hide_secrets
from .json_errors import JsonErrors
from .state import ServerState


def create_app(state: ServerState) -> Starlette:
    state.root = Path(state.root).resolve()
    hide_secrets(state.token, state.read_token)
    state.queue = jobs.JobQueue(state)

    @asynccontextmanager
    async def lifespan(app):
        state.queue.start()  # resumes jobs a restart cut short
        try:
            yield
        finally:
            state.queue.stop()

    hosts = [Middleware(TrustedHostMiddleware, allowed_hosts=list(state.hosts))] if state.hosts else []
    app = Starlette(routes=[*entries.routes(), *jobs.routes(), *page.routes()], lifespan=lifespan,
                    exception_handlers={HTTPException: _json_error}, middleware=[Middleware(JsonErrors), *hosts])
    app.state.server = state
    return app


async def _json_error(request, exc: HTTPException) -> JSONResponse:
    """Unknown paths and methods answer as every other error does: one line of JSON."""
    return JSONResponse({"error": f"{exc.detail}: {request.method} {request.url.path}"}, status_code=exc.status_code,
                        headers=exc.headers)
