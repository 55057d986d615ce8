"""The runnable code blocks of the documentation (README.md, docs/**/*.md): found, checked, run.

A ```sh block is a bash script (`bash -e -o pipefail`), a ```python block runs in one namespace
per page; both in the page's scratch folder, in document order. Other languages are shown,
not run. An HTML comment on the line just before a block changes it:

    <!-- docs-test: slow -->             run only under `pytest -m slow` (a reason may follow)
    <!-- docs-test: skip (reason) -->    never run; the reason is required

Any other `docs-test:` comment, a marker that is not right before a block, or a marker on a
block that is not run is an error: the page's test fails on it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path

from markdown_it import MarkdownIt

RUN = {"sh": "sh", "python": "python"}
"""Fence languages that run (the language as written -> how it runs)."""
LOOKALIKES = {"bash", "shell", "zsh", "py", "python3", "pycon", "ipython"}
"""Fence languages that look runnable but are not the convention: an error, so that no block
that a reader would take for a tested one goes untested."""

MARKER = re.compile(r"<!--\s*docs-test:(?P<body>.*?)-->", re.S)
MARKER_BODY = re.compile(r"\s*(?P<kind>[a-z-]+)\s*(?:\((?P<reason>.*)\))?\s*", re.S)
ADMONITION = re.compile(r"^(?P<indent>[ ]*)(?:!!!|\?\?\?\+?)[ \t]")


class DocsTestError(ValueError):
    """A page whose code blocks or markers break the convention."""


@dataclass(frozen=True)
class Block:
    page: str
    line: int  # the page's line (1-based) of the block's first line of code
    lang: str  # "sh", "python", or the shown block's language ("" for none)
    code: str
    marker: str | None = None  # None, "slow" or "skip"
    reason: str | None = None

    @property
    def runs(self) -> bool:
        return self.lang in RUN.values()

    @property
    def slow(self) -> bool:
        return self.marker == "slow"

    @property
    def skipped(self) -> bool:
        return self.marker == "skip"


def parse_marker(text: str, where: str) -> tuple[str, str | None]:
    """('slow', None) or ('skip', reason) from the body of a `<!-- docs-test: ... -->` comment."""
    m = MARKER_BODY.fullmatch(text)
    kind = m and m["kind"]
    reason = m and m["reason"] is not None and m["reason"].strip()
    if kind == "slow":
        return "slow", reason or None
    if kind == "skip":
        if not reason:
            raise DocsTestError(f"{where}: `docs-test: skip` needs a reason: <!-- docs-test: skip (why) -->")
        return "skip", reason
    raise DocsTestError(
        f"{where}: unknown marker `docs-test:{text}`; use `docs-test: slow` or `docs-test: skip (reason)`"
    )


def _unindent_admonitions(text: str) -> str:
    """The page with each admonition's body (`!!! note` and its indented lines) moved left, so
    that a CommonMark parser sees the code blocks inside; line numbers stay."""
    lines = text.split("\n")
    changed = True
    while changed:
        changed = False
        i = 0
        while i < len(lines):
            m = ADMONITION.match(lines[i])
            if not m:
                i += 1
                continue
            body = " " * (len(m["indent"]) + 4)
            lines[i] = ""
            j = i + 1
            while j < len(lines) and (not lines[j].strip() or lines[j].startswith(body)):
                lines[j] = lines[j][4:] if lines[j].strip() else ""
                j += 1
            changed = True
            i = j
    return "\n".join(lines)


def parse(text: str, page: str) -> list[Block]:
    """Every fenced code block of a Markdown page, with its marker, in document order."""
    tokens = MarkdownIt("commonmark").parse(_unindent_admonitions(text))
    blocks: list[Block] = []
    pending: tuple[str, str | None, int] | None = None  # (kind, reason, line just after the comment)
    for token in tokens:
        if token.type == "inline":
            for child in token.children or []:
                if child.type == "html_inline" and MARKER.search(child.content):
                    raise DocsTestError(
                        f"{page}:{token.map[0] + 1}: a docs-test marker must stand alone on the "
                        "line just before its code block"
                    )
            continue
        if token.type == "html_block" and MARKER.search(token.content):
            line = token.map[0] + 1
            if pending is not None:
                raise DocsTestError(f"{page}:{pending[2]}: marker not followed by a code block")
            found = list(MARKER.finditer(token.content))
            if len(found) > 1:
                raise DocsTestError(f"{page}:{line}: one docs-test marker per code block")
            kind, reason = parse_marker(found[0]["body"], f"{page}:{line}")
            pending = (kind, reason, token.map[1])
            continue
        if token.type == "fence":
            lang = (token.info.split() or [""])[0].strip("{}.").lower()
            first = token.map[0] + 2  # the fence line is map[0] (0-based); code starts below it
            if lang in LOOKALIKES:
                raise DocsTestError(
                    f"{page}:{first - 1}: a ```{lang} block: write ```sh or ```python "
                    "(run by the tests) or ```text (shown only)"
                )
            marker = reason = None
            if pending is not None:
                if pending[2] != token.map[0]:
                    raise DocsTestError(f"{page}:{pending[2]}: marker not on the line just before a code block")
                marker, reason = pending[0], pending[1]
                pending = None
                if lang not in RUN:
                    raise DocsTestError(
                        f"{page}:{first - 1}: a docs-test marker on a ```{lang or 'plain'} block, "
                        "which is not run anyway"
                    )
            blocks.append(Block(page, first, RUN.get(lang, lang), token.content, marker, reason))
        elif pending is not None and token.map is not None and token.map[0] >= pending[2]:
            raise DocsTestError(f"{page}:{pending[2]}: marker not followed by a code block")
    if pending is not None:
        raise DocsTestError(f"{page}:{pending[2]}: marker not followed by a code block")
    return blocks


def to_run(blocks: list[Block], slow: bool) -> list[Block]:
    """The blocks a test runs: the runnable ones, never the skipped, the slow ones only if `slow`."""
    return [b for b in blocks if b.runs and not b.skipped and (slow or not b.slow)]


@dataclass
class Runner:
    """Runs one page's blocks in order in `folder`, with `bin_dir` first on PATH."""

    folder: Path
    bin_dir: Path
    timeout: float = 3600.0

    def __post_init__(self) -> None:
        self.namespace: dict = {"__name__": "__docs__"}
        self.env = dict(os.environ, PATH=f"{self.bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")

    def run(self, block: Block) -> None:
        if block.lang == "sh":
            self._sh(block)
        elif block.lang == "python":
            self._python(block)
        else:
            raise ValueError(f"{block.page}:{block.line}: a ```{block.lang} block does not run")

    def _sh(self, block: Block) -> None:
        script = "trap 'echo \"docs-test: failed at script line $LINENO\" >&2' ERR\n" + block.code
        try:
            result = subprocess.run(
                ["bash", "-e", "-o", "pipefail", "-c", script],
                cwd=self.folder,
                env=self.env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                timeout=self.timeout,
            )
        except subprocess.TimeoutExpired as err:
            raise DocsTestError(
                f"{block.page}:{block.line}: the block took more than {self.timeout:.0f} s\n{_tail(err.stdout or '')}"
            ) from None
        if result.returncode != 0:
            m = re.search(r"docs-test: failed at script line (\d+)", result.stdout)
            line = block.line + int(m[1]) - 2 if m else block.line
            lines = block.code.split("\n")
            command = lines[line - block.line] if 0 <= line - block.line < len(lines) else ""
            output = re.sub(r"docs-test: failed at script line \d+\n?", "", result.stdout)
            raise DocsTestError(
                f"{block.page}:{line}: `{command.strip()}` exited with {result.returncode} "
                f"(block at line {block.line})\n{_tail(output)}"
            )

    def _python(self, block: Block) -> None:
        # Padded so that a traceback's line numbers are the page's.
        source = "\n" * (block.line - 1) + block.code
        cwd = Path.cwd()
        old_path = os.environ.get("PATH")
        os.chdir(self.folder)
        os.environ["PATH"] = self.env["PATH"]
        try:
            exec(compile(source, block.page, "exec"), self.namespace)
        except BaseException as err:  # a snippet's SystemExit or KeyboardInterrupt too
            if isinstance(err, KeyboardInterrupt):
                raise
            frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename == block.page]
            line = frames[-1].lineno if frames else block.line
            text = "".join(traceback.format_exception(err))
            raise DocsTestError(
                f"{block.page}:{line}: {type(err).__name__}: {err} (block at line {block.line})\n{_tail(text)}"
            ) from None
        finally:
            os.chdir(cwd)
            if old_path is None:
                os.environ.pop("PATH", None)
            else:
                os.environ["PATH"] = old_path


def _tail(text: str, lines: int = 80) -> str:
    rows = text.rstrip().split("\n")
    return "\n".join((["..."] if len(rows) > lines else []) + rows[-lines:])


def venv_bin(root: Path) -> Path:
    """The repository's .venv/bin, else the running interpreter's."""
    candidate = root / ".venv" / "bin"
    return candidate if candidate.is_dir() else Path(sys.executable).parent
