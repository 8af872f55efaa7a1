"""The shape of the code at a commit: lines of scripts/, and the longest function and the widest
signature of a package folder (``self``/``cls`` not counted), side by side for two commits.

    python scripts/code_metrics.py --before 8e657f9                 # against the working tree
    python scripts/code_metrics.py --before 8e657f9 --after HEAD --package layerfuse/extract

Each commit is read from git (`git show`), so nothing is checked out. Prints a markdown table.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
from pathlib import Path

from _common import REPO


def files_at(commit: str | None, folder: str) -> dict[str, str]:
    """{path: text} of the .py files under ``folder`` at ``commit`` (None: the working tree)."""
    if commit is None:
        return {str(p.relative_to(REPO)): p.read_text(encoding="utf-8") for p in sorted((REPO / folder).glob("*.py"))}
    names = subprocess.run(["git", "ls-tree", "--name-only", f"{commit}:{folder}"], cwd=REPO, check=True,
                           capture_output=True, text=True).stdout.split()
    return {f"{folder}/{n}": subprocess.run(["git", "show", f"{commit}:{folder}/{n}"], cwd=REPO, check=True,
                                            capture_output=True, text=True).stdout
            for n in names if n.endswith(".py")}


def functions(files: dict[str, str]):
    """(lines, parameters, 'file:name') of every function and method."""
    for path, text in files.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = node.args
                params = [*a.posonlyargs, *a.args, *a.kwonlyargs]
                count = len(params) + bool(a.vararg) + bool(a.kwarg) - bool(params and params[0].arg in ("self", "cls"))
                yield node.end_lineno - node.lineno + 1, count, f"{Path(path).name}:{node.name}"


def measure(commit: str | None, package: str) -> dict[str, str]:
    found = list(functions(files_at(commit, package)))
    longest, widest = max(found), max(found, key=lambda f: (f[1], f[0]))
    scripts = sum(len(t.splitlines()) for t in files_at(commit, "scripts").values())
    return {"lines of scripts/*.py": f"{scripts:,}",
            f"longest function in {package}/": f"{longest[0]} lines ({longest[2]})",
            f"widest signature in {package}/": f"{widest[1]} parameters ({widest[2]})"}


def main(argv=None) -> str:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--before", required=True, help="a commit")
    p.add_argument("--after", default=None, help="a commit (default: the working tree)")
    p.add_argument("--package", default="layerfuse/extract", help="a folder of the repository")
    args = p.parse_args(argv)
    before, after = measure(args.before, args.package), measure(args.after, args.package)
    lines = [f"| | {args.before} | {args.after or 'working tree'} |", "|---|---|---|"]
    lines += [f"| {name} | {before[name]} | {after[name]} |" for name in before]
    text = "\n".join(lines)
    print(text)
    return text


if __name__ == "__main__":
    main()
