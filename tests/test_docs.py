"""The documentation: the site builds strictly, every runnable snippet of README.md and
docs/**/*.md runs (tests/docs_snippets.py), the README's headline table is the one the bench
JSON gives, and the README and the pages keep to their limits."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from docs_snippets import Block, DocsTestError, Runner, parse, to_run, venv_bin
from helpers import needs_toolchain

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "docs"))

import benchdocs  # noqa: E402

PAGES = ["README.md"] + sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md"))
HISTORY = re.compile(r"session [0-9]+|issue [0-9]+", re.I)
README_MAX_LINES = 200
README_MAX_BYTES = 15 * 1024


# ---------------------------------------------------------------------------------------------
# the site


def test_site_builds_strict(tmp_path: Path) -> None:
    """`mkdocs build --strict` (broken links, missing pages, failing macros and generated pages
    all fail it), in seconds."""
    env = dict(
        os.environ,
        DISABLE_MKDOCS_2_WARNING="true",
        NO_MKDOCS_2_WARNING="1",
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    )
    start = time.monotonic()
    result = subprocess.run(
        [str(venv_bin(ROOT) / "mkdocs"), "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    seconds = time.monotonic() - start
    site = tmp_path / "site"
    for page in (
        "reference/cli/index.html",
        "reference/api/index.html",
        "benchmarks/index.html",
        "changelog/index.html",
    ):
        assert (site / page).is_file(), page
    cli = (site / "reference/cli/index.html").read_text()
    assert "keras2clash emit" in cli and "--parallelism" in cli
    api = (site / "reference/api/index.html").read_text()
    assert "keras2clash.emit" in api and "Comparison" in api
    bench = (site / "benchmarks/index.html").read_text()
    assert benchdocs.fmax("iris", "ecp5-85k") in bench
    for plot in ("fmax.png", "latency.png", "resources.png", "accuracy.png", "widths.png", "toolchain.png"):
        assert (site / "benchmarks" / plot).stat().st_size > 1000, plot
    assert seconds < 120, f"the docs build took {seconds:.0f} s"


# ---------------------------------------------------------------------------------------------
# the snippets of every page


def _page_params() -> list:
    params = []
    for page in PAGES:
        try:
            has_slow = any(b.slow for b in parse((ROOT / page).read_text(), page))
        except DocsTestError:
            has_slow = False  # the default test reports the error
        params.append(pytest.param(page, False, id=page))
        if has_slow:
            params.append(pytest.param(page, True, id=f"{page}:slow", marks=pytest.mark.slow))
    return params


@needs_toolchain
@pytest.mark.toolchain
@pytest.mark.parametrize(("page", "slow"), _page_params())
def test_page_snippets(page: str, slow: bool, tmp_path: Path) -> None:
    """The page's sh and python blocks, in order, in a scratch folder holding `examples/`
    (`slow`: the `docs-test: slow` blocks too)."""
    failure = None
    try:
        blocks = to_run(parse((ROOT / page).read_text(), page), slow)
        (tmp_path / "examples").symlink_to(ROOT / "examples", target_is_directory=True)
        runner = Runner(tmp_path, venv_bin(ROOT))
        for block in blocks:
            runner.run(block)
    except DocsTestError as err:
        failure = str(err)
    if failure:
        pytest.fail(failure, pytrace=False)


# ---------------------------------------------------------------------------------------------
# the README


def test_readme_headline_table_is_generated() -> None:
    """The table between the headline markers is what `./scripts/docs.sh readme` writes."""
    text = (ROOT / "README.md").read_text()
    assert benchdocs.HEADLINE_START in text and benchdocs.HEADLINE_END in text, "README.md needs the headline markers"
    assert benchdocs.readme_with_headline(text) == text, (
        "README.md's headline table differs from bench/*.json: run ./scripts/docs.sh readme"
    )


def test_readme_size() -> None:
    data = (ROOT / "README.md").read_bytes()
    lines = data.decode().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines (at most {README_MAX_LINES})"
    assert len(data) <= README_MAX_BYTES, f"README.md has {len(data):,} bytes (at most {README_MAX_BYTES:,})"


@pytest.mark.parametrize("page", PAGES)
def test_no_history_in_prose(page: str) -> None:
    """No line names a development session or an issue number: the docs describe the tool as it is."""
    bad = [
        f"{page}:{i}: {line.strip()}"
        for i, line in enumerate((ROOT / page).read_text().split("\n"), 1)
        if HISTORY.search(line)
    ]
    assert not bad, "history in the docs:\n" + "\n".join(bad)


DOC_REFERENCE = re.compile(r"docs/[\w/.-]+?\.md(?:,? \(?\"(?P<section>[^\"]+)\")?")
"""A page the code cites, with the section it names when it names one in quotes."""
CODE_TREES = ("keras2clash", "clash_lib", "bench", "examples", "scripts", "tests")


def _headings(page: Path) -> list[str]:
    return [line.lstrip("#").strip() for line in page.read_text().splitlines() if line.startswith("#")]


def test_code_cites_pages_and_sections_that_exist() -> None:
    """Comments, docstrings, help texts and generated files cite docs pages by path (and
    section): each cited page exists and has the cited section."""
    bad = []
    for tree in CODE_TREES:
        for path in sorted((ROOT / tree).rglob("*")):
            if path.suffix not in {".py", ".hs", ".j2", ".sh"} or not path.is_file():
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                for m in DOC_REFERENCE.finditer(line):
                    page = ROOT / m.group(0).split(".md")[0].rstrip(",( ")
                    page = page.with_suffix(".md")
                    where = f"{path.relative_to(ROOT)}:{n}: {m.group(0)}"
                    if not page.is_file():
                        bad.append(f"{where}: no such page")
                    elif m["section"] and not any(m["section"] in h for h in _headings(page)):
                        bad.append(f"{where}: no section {m['section']!r}")
    assert not bad, "\n".join(bad)


# ---------------------------------------------------------------------------------------------
# the figures


def test_default_weight_format_is_emits() -> None:
    from keras2clash.quant.autoformat import DEFAULT_WEIGHT_FORMAT

    assert benchdocs.DEFAULT_WEIGHT_FORMAT == DEFAULT_WEIGHT_FORMAT


def test_macros_read_the_bench_json() -> None:
    row = next(r for r in benchdocs.load("fpga.json")["examples"] if r["example"] == "iris")
    assert benchdocs.fmax("iris", "ecp5-85k") == f"{row['fmax_mhz']:.1f} MHz"
    assert benchdocs.latency_cycles("iris") == f"{row['latency_cycles']:,}"
    assert set(benchdocs.devices()) >= {"ecp5-85k", "ice40-up5k"}
    assert benchdocs.part("ice40-up5k") == "iCE40UP5K"
    # an example's name picks its default configuration where there are several
    assert benchdocs.design("cnn_variants", "ecp5-85k").budget is None
    assert benchdocs.design("thesis_cnn", "ecp5-85k").spec == "thesis_cnn@ecp5-85k"
    with pytest.raises(benchdocs.BenchError, match="no design"):
        benchdocs.fmax("no_such_example", "ecp5-85k")
    with pytest.raises(benchdocs.BenchError, match="no place-and-route results"):
        benchdocs.fmax("iris", "xc7a35t")
    table = benchdocs.fpga_table("ecp5-85k").split("\n")
    assert len([line for line in table if line.startswith("| ") and "MHz" in line]) == len(
        [r for r in benchdocs.load("fpga.json")["examples"] if r["routed"]]
    )
    assert benchdocs.bench_value("results.json", "tools.clash_sim.images") == "100"
    seeds = [s for s in row["seeds"] if s["routed"]]
    assert benchdocs.fmax_seeds("iris").startswith("seeds " if len(seeds) > 1 else "seed ")
    mult = next(u for u in row["report"]["utilisation"] if u["resource"] == "multipliers")
    assert benchdocs.resource_share("iris", kind="mult") == f"{100 * mult['used'] / mult['available']:.2f}%"


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def test_da4ml_table_reads_the_bench_json() -> None:
    """The table against da4ml: a row per measured design of bench/da4ml.json, with its
    latency, clock, logic cells and outputs equal to HGQ2's; an estimate is marked as one."""
    assert benchdocs.da4ml_table in benchdocs.MACROS
    data = benchdocs.load("da4ml.json")
    rows = [r for r in data["designs"] if "error" not in r]
    assert {r["design"] for r in rows} == {"da4ml", "keras2clash"}
    lines = benchdocs.da4ml_table().split("\n")
    for r in rows:
        cells = _cells(next(line for line in lines if line.startswith(f"| {r['label']} |")))
        assert cells[1].startswith(f"{r['latency_cycles']:,} cycles = ")
        assert cells[3] == benchdocs.mhz(r["fmax_mhz"]) + ("" if data["routed"] else " (placed)")
        assert cells[6] == f"{r['trellis_comb']:,}" and cells[8] == f"{r['mult18x18d']:,}"
        assert cells[10] == f"{r['bit_exact']:,} of {r['outputs']:,}"


def test_widths_table_reads_the_bench_json() -> None:
    """The widths macro: one example's rows, and the overview (a column per example), are
    bench/widths.json's counts as percentages."""
    assert benchdocs.widths_table in benchdocs.MACROS
    data = benchdocs.load("widths.json")
    example = next(e for e in data["examples"] if e["example"] == "thesis_cnn")
    n = example["images"]
    lines = [line for line in benchdocs.widths_table("thesis_cnn").split("\n") if line.endswith(" pt |")]
    rows = sorted(example["rows"], key=lambda r: r["bits"])
    assert len(lines) == len(rows) > 0
    for line, row in zip(lines, rows):
        assert _cells(line) == [
            row["format"],
            str(row["bits"]),
            f"{100 * row['keras_rounded'] / n:.2f}%",
            f"{100 * row['keras_weights_rounded'] / n:.2f}%",
            f"{100 * row['golden'] / n:.2f}%",
            f"{100 * (example['keras_float'] - row['golden']) / n:+.2f} pt",
        ]
    assert f"Keras float {100 * example['keras_float'] / n:.2f}%" in benchdocs.widths_table("thesis_cnn")

    table = benchdocs.widths_table().split("\n")
    names = [e["example"] for e in data["examples"]]
    assert _cells(table[0]) == ["format", "bits", *names]
    assert _cells(table[2]) == ["test images", "", *(f"{e['images']:,}" for e in data["examples"])]
    assert _cells(table[3]) == [
        "Keras float",
        "",
        *(f"{100 * e['keras_float'] / e['images']:.1f}%" for e in data["examples"]),
    ]
    body = {_cells(line)[0]: _cells(line) for line in table[4:] if line.startswith("| ")}
    for e in data["examples"]:
        column = 2 + names.index(e["example"])
        for row in e["rows"]:
            assert body[row["format"]][1] == str(row["bits"])
            assert body[row["format"]][column] == f"{100 * row['golden'] / e['images']:.1f}%"
    with pytest.raises(benchdocs.BenchError, match="no example"):
        benchdocs.widths_table("no_such_example")


def test_widths_agree_with_the_accuracy_bench() -> None:
    """bench/widths.json and bench/accuracy.json count the same test sets with the same
    default weight format: at accuracy.json's format they agree."""
    fmt = benchdocs.load("accuracy.json")["format"]
    for e in benchdocs.widths_examples():
        accuracy = benchdocs.accuracy_of(e["example"])
        row = next((r for r in e["rows"] if r["format"] == fmt), None)
        if accuracy is None or row is None:
            continue
        right = accuracy["test"]["right"]
        assert (e["images"], e["keras_float"], row["golden"]) == (
            accuracy["test"]["images"],
            right["keras_float"],
            right[benchdocs.DEFAULT_WEIGHT_FORMAT],
        ), e["example"]


def test_widths_levels_off() -> None:
    row = {
        "images": 100,
        "keras_float": 90,
        "rows": [
            {"bits": 4, "golden": 95},
            {"bits": 6, "golden": 80},
            {"bits": 8, "golden": 89},
            {"bits": 10, "golden": 91},
        ],
    }
    assert benchdocs.widths_levels_off(row) == 8
    assert benchdocs.widths_levels_off({**row, "keras_float": 99}) is None


def test_number_formats() -> None:
    assert benchdocs.ns(445.4) == "445 ns" and benchdocs.ns(5634) == "5.63 µs" and benchdocs.ns(31512) == "31.5 µs"
    assert benchdocs.ns(999.4) == "999 ns" and benchdocs.ns(999.6) == "1.00 µs"
    assert benchdocs.rate(16556291.6) == "16.6M" and benchdocs.rate(886.04) == "886"
    assert benchdocs.thousands(41767) == "41,767" and benchdocs.percent(44 / 45) == "97.78%"


def test_readme_region_rewrite() -> None:
    text = f"# x\n\n{benchdocs.HEADLINE_START}\nSTALE\n{benchdocs.HEADLINE_END}\n\nrest\n"
    new = benchdocs.readme_with_headline(text)
    assert new.startswith(f"# x\n\n{benchdocs.HEADLINE_START}\n\n| model |")
    assert new.endswith(f"`.\n\n{benchdocs.HEADLINE_END}\n\nrest\n") and "STALE" not in new
    assert benchdocs.readme_with_headline(new) == new
    with pytest.raises(benchdocs.BenchError, match="markers"):
        benchdocs.readme_with_headline("# no markers\n")


def test_generated_results_files() -> None:
    jet = benchdocs.jet_hgq_results()
    assert not jet.startswith("# ") and "| network |" in jet
    assert "| trial |" in benchdocs.search_front("examples/search_digits")
    with pytest.raises(benchdocs.BenchError, match="not a Markdown file"):
        benchdocs.results_md("../README.md")


# ---------------------------------------------------------------------------------------------
# the snippet parser and runner


def _blocks(text: str) -> list[Block]:
    return parse(text, "page.md")


def test_parser_finds_blocks_in_order_with_lines() -> None:
    text = "# T\n\n```sh\necho a\n```\n\ntext\n\n```python\nx = 1\n```\n\n```text\nshown\n```\n\n```\nplain\n```\n"
    blocks = _blocks(text)
    assert [(b.lang, b.line, b.code) for b in blocks] == [
        ("sh", 4, "echo a\n"),
        ("python", 10, "x = 1\n"),
        ("text", 14, "shown\n"),
        ("", 18, "plain\n"),
    ]
    assert [b.runs for b in blocks] == [True, True, False, False]


def test_slow_marker_applies_to_the_next_block_only() -> None:
    text = "<!-- docs-test: slow -->\n```sh\nslow\n```\n\n```sh\nfast\n```\n"
    blocks = _blocks(text)
    assert [(b.code, b.marker) for b in blocks] == [("slow\n", "slow"), ("fast\n", None)]
    assert [b.code for b in to_run(blocks, slow=False)] == ["fast\n"]
    assert [b.code for b in to_run(blocks, slow=True)] == ["slow\n", "fast\n"]


def test_skip_marker_needs_a_reason() -> None:
    blocks = _blocks("<!-- docs-test: skip (needs the user's model) -->\n```sh\nkeras2clash emit MODEL\n```\n")
    assert blocks[0].skipped and blocks[0].reason == "needs the user's model"
    assert to_run(blocks, slow=True) == []
    for bad in ("<!-- docs-test: skip -->", "<!-- docs-test: skip () -->", "<!-- docs-test: skip ( ) -->"):
        with pytest.raises(DocsTestError, match="needs a reason"):
            _blocks(f"{bad}\n```sh\nx\n```\n")


def test_unknown_or_misplaced_markers_fail() -> None:
    with pytest.raises(DocsTestError, match="unknown marker"):
        _blocks("<!-- docs-test: fast -->\n```sh\nx\n```\n")
    with pytest.raises(DocsTestError, match="page.md:1: unknown marker"):
        _blocks("<!-- docs-test: -->\n```sh\nx\n```\n")
    with pytest.raises(DocsTestError, match="just before"):  # a blank line between
        _blocks("<!-- docs-test: slow -->\n\n```sh\nx\n```\n")
    with pytest.raises(DocsTestError, match="not followed by a code block"):
        _blocks("<!-- docs-test: slow -->\n\ntext\n")
    with pytest.raises(DocsTestError, match="not followed by a code block"):
        _blocks("text\n\n<!-- docs-test: slow -->\n")
    with pytest.raises(DocsTestError, match="not run anyway"):
        _blocks("<!-- docs-test: slow -->\n```text\nx\n```\n")
    with pytest.raises(DocsTestError, match="stand alone"):
        _blocks("Some text <!-- docs-test: slow --> here.\n\n```sh\nx\n```\n")


def test_marker_text_in_code_is_not_a_marker() -> None:
    """A page may show the markers (in a code span or a shown block) without using them."""
    text = "Write `<!-- docs-test: skip (why) -->` before a block.\n\n```text\n<!-- docs-test: bogus -->\n```\n"
    assert [b.lang for b in _blocks(text)] == ["text"]


def test_lookalike_languages_fail() -> None:
    for lang in ("bash", "shell", "py", "pycon"):
        with pytest.raises(DocsTestError, match=f"```{lang} block"):
            _blocks(f"```{lang}\nx\n```\n")


def test_blocks_in_lists_and_admonitions() -> None:
    text = (
        "1. Step:\n\n   ```sh\n   echo list\n   ```\n\n"
        "!!! note\n    Inside:\n\n    <!-- docs-test: slow -->\n    ```python\n    y = 2\n    ```\n\nafter\n"
    )
    blocks = _blocks(text)
    assert [(b.lang, b.line, b.code, b.marker) for b in blocks] == [
        ("sh", 4, "echo list\n", None),
        ("python", 12, "y = 2\n", "slow"),
    ]


def test_runner_sh_and_python_share_the_folder(tmp_path: Path) -> None:
    blocks = _blocks(
        "```sh\necho 41 > n.txt\n```\n\n```python\nn = int(open('n.txt').read())\n```\n\n"
        "```python\nassert n == 41\nopen('m.txt', 'w').write(str(n + 1))\n```\n\n```sh\ntest \"$(cat m.txt)\" = 42\n```\n"
    )
    runner = Runner(tmp_path, venv_bin(ROOT))
    for block in blocks:
        runner.run(block)
    assert runner.namespace["n"] == 41


def test_runner_reports_page_line_and_output(tmp_path: Path) -> None:
    text = "# T\n\n```sh\necho fine\necho 'to the log'\nfalse\necho never\n```\n"
    runner = Runner(tmp_path, venv_bin(ROOT))
    with pytest.raises(DocsTestError) as err:
        runner.run(_blocks(text)[0])
    message = str(err.value)
    assert message.startswith("page.md:6: `false` exited with 1") and "to the log" in message
    with pytest.raises(DocsTestError) as err:
        runner.run(_blocks("# T\n\n```python\nx = 1\n\nraise ValueError('bad value')\n```\n")[0])
    assert str(err.value).startswith("page.md:6: ValueError: bad value")


def test_runner_puts_the_venv_on_path(tmp_path: Path) -> None:
    runner = Runner(tmp_path, venv_bin(ROOT))
    runner.run(_blocks(f'```sh\ntest "$(command -v python)" = {venv_bin(ROOT) / "python"}\n```\n')[0])
