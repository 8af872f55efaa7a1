"""Run folders registered with ``serve --runs DIR`` (sweeps, train-head outputs): their report
tables as HTML, their plots, and the one check that decides which of their files may be served.

A sweep's folder holds ``report.md`` once its report is rendered (`experiments.report.render`);
until then, and for a folder of train-head records, the table is made from the records themselves
with the same `experiments.report.table`.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

from ..errors import LayerfuseError
from ..tasks import DEFAULT_TASK

REPORT = "report.md"
SERVED = {".png": "image/png", ".md": "text/plain; charset=utf-8"}  # plots, and the report as text
_RULE = re.compile(r"^:?-+:?$")  # a markdown table's separator cell: ---, ---:, :---:


def run_file(folder: Path, name: str) -> Path | None:
    """``name`` inside ``folder`` if it may be served, else None: outside the folder (see `inside`),
    or not of a served kind."""
    path = inside(folder, name)
    return path if path is not None and path.suffix.lower() in SERVED else None


def inside(folder: Path, name: str) -> Path | None:
    """The regular file ``name`` in ``folder``, resolved; None for a name leading outside the folder
    (``..``, an absolute path, a symlink pointing out) and for anything but an existing file."""
    base = Path(folder).resolve()
    try:
        path = (base / name).resolve(strict=True)
    except (OSError, RuntimeError):  # missing, or a symlink loop
        return None
    return path if path.is_relative_to(base) and path.is_file() else None


def plots(folder: Path) -> list[str]:
    """The folder's own PNG files that may be served, by name."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(p.name for p in folder.iterdir() if p.suffix.lower() == ".png" and run_file(folder, p.name))


def report_html(folder: Path) -> str:
    """The folder's report as HTML: ``report.md``, else a table of its records; '' when it has neither."""
    folder = Path(folder)
    report = run_file(folder, REPORT)
    if report is not None:
        return markdown_html(report.read_text(encoding="utf-8", errors="replace"))
    try:  # one folder's damaged records are one line on the page, not a 500 for every section of it
        tables = [_records_table(records, folder) for records in _records(folder).values()]
    except LayerfuseError as exc:
        return f"<p>{html.escape(str(exc))}</p>"
    except (KeyError, TypeError, ValueError) as exc:  # a train-head record edited by hand: no read_results checks
        return f"<p>{html.escape(str(folder))}: its run records do not make a table ({type(exc).__name__}: " \
               f"{html.escape(str(exc))})</p>"
    return "".join(markdown_html(t) for t in tables)


def _records(folder: Path) -> dict[str, list[dict]]:
    """Run records by task: a sweep's results file, else train-head's ``<run>.json`` files."""
    from ..experiments.results import RESULTS, read_results

    if not folder.is_dir():
        return {}
    results = inside(folder, RESULTS)  # read only from inside the folder, as files are served
    records = list(read_results(str(results)).values()) if results else []
    if not records:
        for path in filter(None, (inside(folder, p.name) for p in sorted(folder.glob("*.json")))):
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            # a run's record (its evaluations, its time), not the `.head.json` of its checkpoint
            if isinstance(record, dict) and {"config", "evals", "seconds"} <= record.keys():
                records.append(record)
    by_task: dict[str, list[dict]] = {}
    for r in records:
        if isinstance(r.get("config"), dict):
            by_task.setdefault(r["config"].get("task", DEFAULT_TASK), []).append(r)
    return by_task


def _records_table(records: list[dict], folder: Path) -> str:
    from ..experiments.report import check_comparable, metric_of, table  # matplotlib comes with it: only when needed

    check_comparable(records, str(folder))  # as `sweep --report` refuses them
    runs = f"{len(records)} run{'' if len(records) == 1 else 's'}"
    return f"{runs}, {metric_of(records).name}: the table made from their records\n\n{table(records)}"


def markdown_html(text: str) -> str:
    """The markdown a report holds, as HTML: headings, tables (with their column alignment) and
    paragraphs; anything else shows as plain, escaped text."""
    out, block = [], []

    def flush():
        if block and block[0].startswith("|"):
            out.append(_table_html(block))
        elif block:
            out.append(f"<p>{html.escape(' '.join(block))}</p>")
        block.clear()

    for line in text.splitlines():
        line = line.strip()
        heading = re.match(r"^(#{1,4})\s+(.*)$", line)
        if not line or heading or (block and line.startswith("|") != block[0].startswith("|")):
            flush()
        if heading:  # the page's own headings come first: a report's `#` is the page's h3
            level = len(heading[1]) + 2
            out.append(f"<h{level}>{html.escape(heading[2])}</h{level}>")
        elif line:
            block.append(line)
    flush()
    return "\n".join(out)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def _table_html(lines: list[str]) -> str:
    rows = [_cells(line) for line in lines]
    head, align = rows[0], ["left"] * len(rows[0])
    body = rows[1:]
    if body and all(_RULE.match(c) for c in body[0]):
        align = ["right" if c.endswith(":") and not c.startswith(":") else "center" if c.startswith(":") and
                 c.endswith(":") else "left" for c in body[0]]
        body = body[1:]
    style = lambda i: f' class="{align[i]}"' if i < len(align) and align[i] != "left" else ""  # noqa: E731
    th = "".join(f"<th{style(i)}>{html.escape(c)}</th>" for i, c in enumerate(head))
    trs = "".join("<tr>" + "".join(f"<td{style(i)}>{html.escape(c)}</td>" for i, c in enumerate(row)) + "</tr>"
                  for row in body)
    return f'<table class="report"><thead><tr>{th}</tr></thead><tbody>{trs}</tbody></table>'
