"""MkDocs hook: results files included in a page (``--8<-- "NAME.md"``) keep the page's contents list.

A results file starts with its own ``# Title``. Included as it is, that title is a second top-level
heading in the page, and the theme's contents list drops the sections that follow it. This hook
inlines each include itself, before pymdownx.snippets would, with the file's headings moved below the
section it sits in (a ``#`` under a ``##`` section becomes ``###``), and indented as the include line
is (inside an admonition). Paths are looked up in snippets' ``base_path``, as snippets does.
"""

from __future__ import annotations

import re
from pathlib import Path

INCLUDE = re.compile(r'^(?P<indent>[ \t]*)--8<--[ \t]+"(?P<name>[^"]+)"[ \t]*$')
HEADING = re.compile(r"^(#{1,6})([ \t].*)$")
FENCE = re.compile(r"^[ \t]*(```|~~~)")


def demote(text: str, by: int) -> str:
    """Every ATX heading outside code fences ``by`` levels deeper (at most ``######``)."""
    out, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        m = None if fenced else HEADING.match(line)
        out.append(("#" * min(6, len(m.group(1)) + by) + m.group(2)) if m else line)
    return "\n".join(out)


def _base_paths(config) -> list[Path]:
    root = Path(config["config_file_path"]).parent
    options = config["mdx_configs"].get("pymdownx.snippets", {})
    paths = options.get("base_path", ["."])
    return [root / p for p in ([paths] if isinstance(paths, str) else paths)]


def on_page_markdown(markdown: str, page, config, files) -> str:
    bases = _base_paths(config)
    out, level, fenced = [], 0, False
    for line in markdown.splitlines():
        if FENCE.match(line):
            fenced = not fenced
        heading = None if fenced else HEADING.match(line)
        if heading:
            level = len(heading.group(1))
        include = None if fenced else INCLUDE.match(line)
        if include is None:
            out.append(line)
            continue
        found = next((b / include["name"] for b in bases if (b / include["name"]).is_file()), None)
        if found is None:
            raise FileNotFoundError(f"{page.file.src_path}: included file {include['name']!r} is not under "
                                    f"{', '.join(str(b) for b in bases)}")
        body = demote(found.read_text(encoding="utf-8"), level)
        out += [(include["indent"] + x) if x.strip() else "" for x in body.splitlines()]
    return "\n".join(out) + "\n"
