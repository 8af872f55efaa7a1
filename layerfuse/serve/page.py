"""The web page at ``/``: the root's entries, the extraction queue's jobs, and the reports and
plots of the run folders given with ``--runs``; ``/runs/<i>/<file>`` serves a plot or report of the
i-th folder (`runs.run_file` decides which files may be).

Plain server-rendered HTML with a little CSS and no script; every value shown is escaped. While a
job runs or waits, the page reloads itself every `REFRESH_SECONDS` to show its progress.

With a read token set, every route here answers 401 without it. A browser cannot send a bearer
header, so the token is also taken as the password of HTTP Basic authentication (any user name):
the browser asks for it once and sends it with the page's images too.
"""

from __future__ import annotations

import base64
import html
import time
from pathlib import Path
from urllib.parse import quote

from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route

from ..cache.manage import EntryStatus
from ..cache.usage import last_read, perhaps_written
from ..display import human_bytes
from ..tasks import DEFAULT_TASK
from . import runs
from .entries import served_entries

REFRESH_SECONDS = 10
ACTIVE = ("running", "queued")  # job states shown first, and that keep the page reloading

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em 2em; color: #222; }
h1 { font-size: 1.4em; margin-bottom: 0.2em; } h2 { font-size: 1.15em; margin-top: 1.6em; }
h3, h4, h5, h6 { font-size: 1em; margin: 1em 0 0.4em; }
.muted, small { color: #666; }
table { border-collapse: collapse; margin: 0.4em 0 1em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; vertical-align: top; }
th { background: #f0f0f0; } tbody tr:nth-child(even) { background: #fafafa; }
.right { text-align: right; white-space: nowrap; } .center { text-align: center; }
.state { padding: 0 0.4em; border-radius: 3px; font-size: 0.9em; }
.complete, .done { background: #d9f2d9; } .partial, .queued { background: #fbeccb; }
.writing, .running { background: #d6e6fa; } .failed { background: #f8d3d3; }
section.run { border-top: 1px solid #ddd; margin-top: 1em; }
figure { display: inline-block; vertical-align: top; margin: 0.4em 1em 0.4em 0; }
figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 0.85em; color: #666; }
"""


def routes() -> list[Route]:
    return [Route("/", index, methods=["GET"]),
            Route("/runs/{index:int}/{name:path}", run_file_response, methods=["GET"])]


def index(request: Request) -> Response:
    """Sync on purpose: Starlette runs it in a thread, and listing entries walks the disk."""
    if not _may_read(request):
        return _unauthorized()
    state = request.app.state.server
    jobs = _jobs(state.queue)
    refresh = any(j.get("state") in ACTIVE for j in jobs or [])
    entries = served_entries(str(state.root))
    body = [f"<h1>layerfuse: {html.escape(str(state.root))}</h1>",
            f'<p class="muted">{len(entries)} entries, {human_bytes(sum(e.bytes_on_disk or 0 for e in entries))}; '
            f'shown {time.strftime("%Y-%m-%d %H:%M:%S %Z")}</p>',
            _entries_section(entries), _jobs_section(jobs), _runs_section(state.runs)]
    head = f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">' if refresh else ""
    return HTMLResponse(f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>layerfuse</title>{head}'
                        f'<style>{STYLE}</style></head><body>{"".join(body)}</body></html>')


def run_file_response(request: Request) -> Response:
    if not _may_read(request):
        return _unauthorized()
    folders = request.app.state.server.runs
    i, name = request.path_params["index"], request.path_params["name"]
    path = runs.run_file(folders[i], name) if 0 <= i < len(folders) else None
    if path is None:
        return PlainTextResponse("not found", status_code=404)
    return FileResponse(path, media_type=runs.SERVED[path.suffix.lower()])


# -- sections ------------------------------------------------------------------------------------

ENTRY_COLUMNS = ("model", "dataset", "rows", "stored as", "forward", "max length", "splits", "size", "state",
                 "finished", "last read")


def _entries_section(entries: list[EntryStatus]) -> str:
    if not entries:
        return '<h2>Entries</h2><p class="muted">none yet</p>'
    rows = "".join(_entry_row(e) for e in entries)
    return f"<h2>Entries</h2><table><thead><tr>{_th(ENTRY_COLUMNS)}</tr></thead><tbody>{rows}</tbody></table>"


def _entry_row(e: EntryStatus) -> str:
    f = e.fields
    rows = f.get("granularity", "?") + (f"/{f['pooling']}" if f.get("pooling") not in (None, "none") else "")
    dataset = e.dataset + (f" ({f['task']})" if f.get("task", DEFAULT_TASK) != DEFAULT_TASK else "")
    splits = ", ".join(s if done else f"{s} (partial)" for s, done in e.splits.items())
    state = "complete" if e.complete else "writing" if perhaps_written(e.path) else "partial"
    name = Path(e.path).name
    text = [dataset, rows, f.get("dtype", "?"), f.get("precision", "?"), f.get("max_length", "?"), splits,
            human_bytes(e.bytes_on_disk)]
    cells = [f"{html.escape(str(e.model))}<br><small>{html.escape(name)}</small>",
             *(html.escape(str(t)) for t in text), f'<span class="state {state}">{state}</span>',
             html.escape((e.finished or "-").replace("T", " ")[:16]), html.escape(_ago(last_read(e.path)))]
    right = (ENTRY_COLUMNS.index("max length"), ENTRY_COLUMNS.index("size"))
    tds = (f"<td{' class=right' if i in right else ''}>{c}</td>" for i, c in enumerate(cells))
    return "<tr>" + "".join(tds) + "</tr>"


JOB_COLUMNS = ("job", "state", "model", "dataset", "entry", "progress", "error")


def _jobs(queue) -> list[dict] | None:
    """The queue's jobs (`jobqueue.JobQueue.list`), running and queued first; None when this server
    has no queue to ask."""
    lister = getattr(queue, "list", None)
    if lister is None:
        return None
    jobs = list(lister())
    return sorted(jobs, key=lambda j: ACTIVE.index(j.get("state")) if j.get("state") in ACTIVE else len(ACTIVE))


def _jobs_section(jobs: list[dict] | None) -> str:
    if jobs is None:
        return '<h2>Jobs</h2><p class="muted">no extraction queue on this server</p>'
    if not jobs:
        return '<h2>Jobs</h2><p class="muted">none</p>'
    rows = "".join(_job_row(j) for j in jobs)
    return f"<h2>Jobs</h2><table><thead><tr>{_th(JOB_COLUMNS)}</tr></thead><tbody>{rows}</tbody></table>"


def _job_row(job: dict) -> str:
    state = str(job.get("state", "?"))
    progress = job.get("progress") or {}
    done, total = progress.get("done") or 0, progress.get("total") or 0
    bar = "-"
    if total:
        split = f"{progress['split']}: " if progress.get("split") else ""
        bar = (f'<progress value="{done}" max="{total}"></progress> '
               f"{html.escape(f'{split}{done:,} / {total:,} ({done / total:.0%})')}")
    entry = job.get("entry") or job.get("path") or "-"  # the path is known from the start, the entry once done
    cells = [html.escape(str(job.get("id", "?"))),
             f'<span class="state {html.escape(state)}">{html.escape(state)}</span>',
             html.escape(str(job.get("model", "?"))), html.escape(str(job.get("dataset", "?"))),
             html.escape(Path(str(entry)).name), bar, html.escape(str(job.get("error") or ""))]
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def _runs_section(folders: list[Path]) -> str:
    if not folders:
        return ""
    parts = ["<h2>Runs</h2>"]
    for i, folder in enumerate(folders):
        parts.append(f'<section class="run"><h3>{html.escape(str(folder))}</h3>')
        if not Path(folder).is_dir():
            parts.append('<p class="muted">not found</p></section>')
            continue
        report = runs.report_html(folder)
        parts.append(report or '<p class="muted">no report or run records yet</p>')
        if runs.run_file(folder, runs.REPORT):
            parts.append(f'<p><a href="/runs/{i}/{quote(runs.REPORT)}">{runs.REPORT}</a></p>')
        for name in runs.plots(folder):
            src = f"/runs/{i}/{quote(name)}"
            parts.append(f'<figure><a href="{src}"><img src="{src}" alt="{html.escape(name)}"></a>'
                         f"<figcaption>{html.escape(name)}</figcaption></figure>")
        parts.append("</section>")
    return "".join(parts)


# -- helpers -------------------------------------------------------------------------------------

def _th(names) -> str:
    return "".join(f"<th>{html.escape(n)}</th>" for n in names)


def _ago(seconds_since_epoch: float | None) -> str:
    if seconds_since_epoch is None:
        return "never"
    age = max(0.0, time.time() - seconds_since_epoch)
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if age >= size:
            return f"{age // size:.0f} {unit} ago"
    return "just now"


def _may_read(request: Request) -> bool:
    state = request.app.state.server
    header = request.headers.get("authorization")
    return state.may_read(header) or state.may_read(_basic_as_bearer(header))


def _basic_as_bearer(header: str | None) -> str | None:
    """``Basic base64(user:token)`` as ``Bearer token``: what a browser sends once asked."""
    if not header or not header.startswith("Basic "):
        return None
    try:
        decoded = base64.b64decode(header[len("Basic "):], validate=True).decode()
    except (ValueError, UnicodeDecodeError):
        return None
    return "Bearer " + decoded.partition(":")[2]


def _unauthorized() -> Response:
    return PlainTextResponse("a read token is needed: Authorization: Bearer TOKEN, or TOKEN as the password",
                             status_code=401, headers={"WWW-Authenticate": 'Basic realm="layerfuse"'})
