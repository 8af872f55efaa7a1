"""Every shell block (```bash, ```sh, ```console) of README.md and docs/ runs as a reader types it, or
says why not in an HTML comment on the line before it (``<!-- not run by the tests: ... -->``, as the
Python blocks do: a GPU, the hub, S3, torchrun, a server left running, pip, data the reader downloads).

The blocks of a page run in order, in a folder of their own, with the cache root ($LAYERFUSE_HOME) a
copy of the root holding the tiny test entry: what the worked example's `extract` writes is the tiny
entry here (`extract` alone names it), and sizes meant for real data are scaled to it (`TINY`). Each
command is the console script it names (`[project.scripts]`), invoked in this process (an interpreter
per command would cost seconds each; a sweep's runs, in this process too), and must exit 0;
`ls DIR  # a.txt b.png ...` checks that DIR holds the files its comment names. A page whose commands
are the first ones of a page run before it (the getting-started page's copy of the README's worked
example) is not run again."""

from __future__ import annotations

import importlib
import re
import shlex
import shutil
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import make_sentences

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
BLOCK = re.compile(r"(?P<before>[^\n]*)\n```(?P<lang>bash|sh|console)\n(?P<code>.*?)\n```", re.S)
SKIP = "<!-- not run by the tests"
SCRIPTS = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["scripts"]
# The sizes of the examples, for the tiny entry (2 layers, 122 train sentences, 3 entity types); the
# placeholders of the pages, for what the test made. `{model}`, `{data}`, `{entry}`, `{folder}` are
# filled in per run.
TINY = [
    (re.compile(r"^extract$"), "extract --model {model} --dataset {data}"),  # the worked example's entry: tiny
    (re.compile(r"--shots 8 --layers auto:3"), "--shots 2 --layers auto:2"),  # no later command reads this head
    (re.compile(r"--layers auto:3"), "--layers auto:2"),
    (re.compile(r"--epochs 25 --seed 0$"), "--epochs 2 --seed 0"),
    (re.compile(r"--shots 8,(16,)?32(,64,128)? --epochs (10|25,50,75,100) --trials [35]"),
     "--shots 2,4 --epochs 2 --trials 1"),
    (re.compile(r"--shots 128\b"), "--shots 4"),
    (re.compile(r"--shots 8 --mode ft$"), "--shots 2 --mode ft"),
    (re.compile(r"--mode ft(?!.*--epochs)"), "--mode ft --epochs 1"),  # the backbone too: 1 epoch, not 10
    (re.compile(r"--cache PATH\b"), "--cache {entry}"),
    (re.compile(r"\bPATH/"), "{folder}/"),
]
OWN_DATA_COLUMNS = ("word", "ner", "pos")  # the layout of PATH/my-data, as the datasets page shows it


@dataclass
class Command:
    text: str  # as the page has it, continuation lines joined
    comment: str  # what follows an unquoted `#`


@dataclass
class Block:
    page: str
    line: int
    commands: list[Command]
    skip: str | None

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def _split_comment(line: str) -> tuple[str, str]:
    """(command, comment) at the first `#` outside quotes that starts a word."""
    quote = None
    for i, ch in enumerate(line):
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip(), line[i + 1:].strip()
    return line.rstrip(), ""


def _commands(code: str, lang: str) -> list[Command]:
    """The commands of a block: a console block's `$ ` lines (its other lines are output), every line
    of a bash block; a trailing backslash continues a command on the next line."""
    lines = code.splitlines()
    if lang == "console":
        lines = [line for i, line in enumerate(lines) if line.startswith("$ ")
                 or (i and lines[i - 1].endswith("\\"))]
        lines = [line[2:] if line.startswith("$ ") else line for line in lines]
    found, pending, comments = [], "", []
    for line in lines:
        text, comment = _split_comment(line)
        if comment:
            comments.append(comment)
        if text.endswith("\\"):
            pending += text[:-1].strip() + " "
            continue
        text = (pending + text.strip()).strip()
        pending = ""
        if text:
            found.append(Command(text, " ".join(comments)))
        comments = [] if text else comments
    return found


def blocks() -> list[Block]:
    found = []
    for page in PAGES:
        name = str(page.relative_to(REPO))
        if "results" in page.relative_to(REPO).parts:
            continue
        text = page.read_text(encoding="utf-8")
        for m in BLOCK.finditer(text):
            line = text[: m.start("code")].count("\n") + 1
            before = m["before"].strip()
            found.append(Block(name, line, _commands(m["code"], m["lang"]),
                               before if before.startswith(SKIP) else None))
    return found


def _plain(text: str) -> str | None:
    """Why ``text`` is not a plain command this test can run (a pipe, `&&`, `$(...)`, a glob, `~`), or None."""
    unquoted = re.sub(r"\"[^\"]*\"|'[^']*'", "", text)
    shell = re.search(r"[|;&<>`$*?~]", unquoted)
    if shell:
        return f"{text!r} needs a shell ({shell.group()!r})"
    verb = shlex.split(text)[0]
    if verb not in SCRIPTS and verb != "ls":
        return f"{text!r}: {verb!r} is not a layerfuse command"
    return None


def test_every_shell_block_is_found_and_runs_or_says_why():
    found = blocks()
    assert any(b.page == "README.md" for b in found) and any("getting-started" in b.page for b in found)
    assert any(b.skip is None for b in found) and any(b.skip for b in found)
    for block in found:
        if block.skip is None:
            problems = [p for p in map(_plain, (c.text for c in block.commands)) if p]
            assert not problems, f"{block.id}: {problems[0]}; run it plainly or mark it `{SKIP}: REASON -->`"
        else:
            assert re.fullmatch(r"<!-- not run by the tests: \S.* -->", block.skip), block.id


RAN: dict[str, list[str]] = {}  # page -> the commands it ran, as the page has them


def _pages() -> list[str]:
    return list(dict.fromkeys(b.page for b in blocks() if b.skip is None))


def _own_data(folder: Path) -> None:
    """PATH/my-data of the datasets page: train, dev and test files, word tag POS on each line."""
    folder.mkdir(parents=True)
    for split, n, seed in (("train", 120, 11), ("dev", 40, 12), ("test", 40, 13)):
        lines = []
        for words, tags in make_sentences(n, seed):
            lines += [f"{w} {t} {'NNP' if t != 'O' else 'NN'}" for w, t in zip(words, tags)] + [""]
        (folder / f"{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _run(text: str, comment: str, cwd: Path) -> None:
    args = shlex.split(text)
    if args[0] == "ls":
        for folder in args[1:]:
            names = {p.name for p in (cwd / folder).iterdir()}
            promised = [w for w in comment.split() if re.fullmatch(r"[\w-]+\.\w+", w)]
            assert set(promised) <= names, f"{text}: {sorted(set(promised) - names)} missing from {sorted(names)}"
        return
    module, attr = SCRIPTS[args[0]].split(":")
    command = getattr(importlib.import_module(module), attr)
    if hasattr(command, "loads"):  # a console script's launcher (`layerfuse.cli.launch`): the command it runs
        module, attr = command.loads.split(":")
        command = getattr(importlib.import_module(module), attr)
    result = CliRunner().invoke(command, args[1:], catch_exceptions=True)
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    assert result.exit_code == 0, f"{text}\n{result.output[-3000:]}"


@pytest.mark.parametrize("page", _pages())
def test_shell_blocks_run_as_typed(page, tiny_cache, tiny_bert_dir, tiny_conll_dir, tmp_path, monkeypatch):
    from layerfuse.experiments import runner

    commands = [c for b in blocks() if b.page == page and b.skip is None for c in b.commands]
    texts = [c.text for c in commands]
    same = next((other for other, ran in RAN.items() if ran[: len(texts)] == texts), None)
    if same:
        pytest.skip(f"the commands of {same}, run there")
    grid = runner.run_grid  # a sweep's runs in this process: a worker process would import torch anew
    monkeypatch.setattr(runner, "run_grid", lambda *a, workers=None, **k: grid(*a, workers=workers or 0, **k))
    root = tmp_path / "cache"
    shutil.copytree(Path(tiny_cache).parent, root)
    folder = tmp_path / "data"
    _own_data(folder / "my-data")
    places = {"model": str(tiny_bert_dir), "data": str(tiny_conll_dir), "entry": str(root / Path(tiny_cache).name),
              "folder": str(folder)}
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("LAYERFUSE_HOME", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    for command in commands:
        text = command.text
        for real, tiny in TINY:
            text = real.sub(tiny.format(**places), text)
        _run(text, command.comment, work)
    RAN[page] = texts
