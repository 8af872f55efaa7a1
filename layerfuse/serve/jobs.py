"""The job API: ``POST /api/jobs`` queues an extraction on the server's device (identical requests
join one job), ``GET /api/jobs`` and ``GET /api/jobs/<id>`` report progress. The queue itself is
`jobqueue.JobQueue`.

A request is checked completely before anything is queued, and a refused one creates no job and
no entry: a body over `MAX_BODY_BYTES` gets Starlette's 413; a wrong token (401), malformed JSON,
unknown fields or bad values (400), remote code on a server started without it (403), a model or
dataset the server cannot find, a dataset or model path outside the server's data directories
(`admit`), a model config that does not load, a label set the dataset lacks or a unit size out of
bounds (422) answer one line of JSON, ``{"error": ...}``, which never quotes a file.
"""

from __future__ import annotations

import json
import logging
import typing

from starlette.concurrency import run_in_threadpool
from starlette.responses import JSONResponse
from starlette.routing import Route

from ..errors import LayerfuseError
from ..extract.entry import wanted_label_sets
from ..extract.models import model_info
from ..extract.run import ExtractConfig, describe, load_data
from .admit import Refusal, admit, is_path, without_contents
from .jobqueue import OPTIONS, JobQueue, config_of, one_line
from .stamps import api_times
from .state import MAX_BODY_BYTES

__all__ = ["JobQueue", "routes", "OPTIONS"]

_TYPES = typing.get_type_hints(ExtractConfig)
log = logging.getLogger("layerfuse.serve")


class RequestError(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


def routes() -> list[Route]:
    return [
        # Starlette answers 413 itself once the body (or its Content-Length) passes the limit. One route for
        # both methods: as two, a 405 named the first one's alone in its Allow header (POST, not GET).
        Route("/api/jobs", jobs, methods=["GET", "POST"], max_body_size=MAX_BODY_BYTES),
        Route("/api/jobs/{job_id}", show_job, methods=["GET"]),
    ]


async def submit(request):
    server = request.app.state.server
    try:
        if not server.may_write(request.headers.get("authorization")):
            raise RequestError(401, "queuing a job needs the server's token (Authorization: Bearer ...)")
        options = parse_options(await request.body(), trust_remote_code=server.trust_remote_code)
        _admit(options, server)
        config = config_of(options, state=server)
        entry = await run_in_threadpool(_entry, config)
    except RequestError as exc:
        return _error(exc.status, str(exc))
    except LayerfuseError as exc:  # ExtractConfig's own checks of the values
        return _error(400, one_line(exc))
    job, joined = server.queue.submit(options, **entry)
    return JSONResponse({**api_times(job), "joined": joined}, status_code=200 if joined else 202,
                        headers={"Location": f"/api/jobs/{job['id']}"})


async def jobs(request):
    return await (submit if request.method == "POST" else list_jobs)(request)


async def list_jobs(request):
    server = request.app.state.server
    if not server.may_read(request.headers.get("authorization")):
        return _error(401, "reading needs the server's token (Authorization: Bearer ...)")
    return JSONResponse({"jobs": [api_times(job) for job in server.queue.list()]})


async def show_job(request):
    server = request.app.state.server
    if not server.may_read(request.headers.get("authorization")):
        return _error(401, "reading needs the server's token (Authorization: Bearer ...)")
    job = server.queue.get(request.path_params["job_id"])
    if job is None:
        return _error(404, f"no job {request.path_params['job_id']!r}")
    return JSONResponse(api_times(job))


def parse_options(body: bytes, *, trust_remote_code: bool) -> dict:
    """The request's `ExtractConfig` fields, each of its declared type (JSON lists for tuples)."""
    try:
        options = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError(400, f"the body is not JSON: {one_line(exc)}") from None
    except RecursionError:  # JSON nested deeper than the parser's stack, yet under the body limit
        raise RequestError(400, "the body is JSON nested too deeply to read") from None
    if not isinstance(options, dict):
        raise RequestError(400, "the body must be a JSON object of extract options")
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise RequestError(400, f"unknown option {', '.join(map(repr, unknown))}; known: {', '.join(OPTIONS)}")
    for name, value in options.items():
        if not _fits(value, _TYPES[name]):
            raise RequestError(400, f"option {name!r} must be {_TYPES[name]}, not {json.dumps(value)[:80]}")
        if isinstance(value, int) and not isinstance(value, bool) and value < 0:
            raise RequestError(400, f"option {name!r} must not be negative, not {value}")
    if options.get("trust_remote_code") and not trust_remote_code:
        raise RequestError(403, "this server runs without --trust-remote-code; it runs no model code from the hub")
    return options


def _admit(options: dict, server) -> None:
    """What the server refuses whatever the values' types: a dataset path outside its data
    directories, a unit size out of bounds (422, before anything is read)."""
    try:
        admit(options, server)
    except Refusal as exc:
        raise RequestError(422, str(exc)) from None


def _fits(value, hint) -> bool:
    """Whether a JSON value has the type ``hint`` (None, bool, int, float, str, tuple[str, ...] and
    unions of them: what `ExtractConfig` declares)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if args and origin is not tuple:  # a union
        return any(_fits(value, arg) for arg in args)
    if origin is tuple:
        return isinstance(value, list) and all(_fits(v, args[0]) for v in value)
    if hint is type(None):
        return value is None
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, hint)


def _entry(config: ExtractConfig) -> dict:
    """The entry's path, key and names and the splits the job makes, as `extract` computes them:
    reads the dataset and the model's config, loads no weights. A model or dataset not found, or a
    label set the dataset lacks, is a 422 (naming no line of any file)."""
    try:
        dataset = load_data(config, splits=list(config.splits) if config.splits else None)
        wanted_label_sets(config, dataset)  # here, not once the job runs
        path, key, attrs = describe(config, dataset=dataset, info=_model(config))
    except (LayerfuseError, OSError) as exc:
        raise RequestError(422, without_contents(one_line(exc))) from None
    return {"path": path, "key": key, "splits": list(dataset.splits), "model": attrs["model"],
            "dataset": attrs["dataset"]}


def _model(config: ExtractConfig):
    """The model's `ModelInfo`, read from its config as `extract` reads it. A config that does not
    load is a 422 naming the exception's class only: transformers words its errors with the file's
    values (a ``model_type``, a field of the wrong type), and a wrongly typed field raises whatever
    the config class raises, not a `LayerfuseError`. Only an error about a model that is no path
    here (a hub id offline, a built-in model not installed) keeps its words; the log keeps them all."""
    try:
        return model_info(config.model, trust_remote_code=config.trust_remote_code, cache_dir=config.cache_dir)
    except Exception as exc:
        log.warning("job refused: model %r: %s", config.model, one_line(exc))  # for the operator only
        if isinstance(exc, LayerfuseError) and not (config.model and is_path(config.model)):
            raise RequestError(422, one_line(exc)) from None
        raise RequestError(422, f"cannot read the model's config: {type(exc.__cause__ or exc).__name__}") from None


def _error(status: int, message: str) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None  # what RFC 6750 asks of a 401
    return JSONResponse({"error": message}, status_code=status, headers=headers)
