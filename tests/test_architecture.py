"""The package's shape: the import contracts (pyproject's [tool.importlinter]) hold, and no
stage outside `keras2clash/kinds` switches on the name of a kind that has a home there."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import keras2clash.kinds  # noqa: F401  (registers every kind)
from keras2clash.registry import kinds

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "keras2clash"


def test_import_contracts_hold() -> None:
    lint = Path(sys.executable).parent / "lint-imports"
    proc = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "Contracts: 2 kept, 0 broken." in proc.stdout


def _names(node: ast.expr) -> set[str]:
    """The string constants a comparison operand stands for: "x", ("x", "y"), {"x"}."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return {e.value for e in node.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)}
    return set()


def _reads_a_type(node: ast.expr) -> bool:
    """`plan.type`, `layer.type`, `record.type`, or a local named `kind`/`type_name`."""
    return (isinstance(node, ast.Attribute) and node.attr == "type") or (
        isinstance(node, ast.Name) and node.id in ("kind", "type_name")
    )


def test_no_stage_switches_on_a_kind_with_a_home() -> None:
    homed = {t for kind in kinds() for t in kind.types}
    assert {
        "zeropad2d",
        "flatten",
        "maxpool2d",
        "globalavgpool",
        "batchnorm",
        "activation",
        "add",
        "concatenate",
    } <= homed
    switches = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if (PACKAGE / "kinds") in path.parents:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if not isinstance(node, ast.Compare):
                continue
            operands = [node.left, *node.comparators]
            if any(_reads_a_type(o) for o in operands):
                named = set().union(*(_names(o) for o in operands)) & homed
                if named:
                    switches.append(f"{path.relative_to(ROOT)}:{node.lineno}: {sorted(named)}")
    assert not switches, "stages naming kinds that live in keras2clash/kinds:\n" + "\n".join(switches)


def test_ruff_lints_and_formats_everything() -> None:
    """`ruff check` and `ruff format --check` pass on every Python file (pyproject's [tool.ruff])."""
    ruff = Path(sys.executable).parent / "ruff"
    for args in (["check"], ["format", "--check"]):
        proc = subprocess.run([str(ruff), *args, "."], cwd=ROOT, capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


TYPED = [
    "keras2clash/ir",
    "keras2clash/quant",
    "keras2clash/hw",
    "keras2clash/backend",
    "keras2clash/kinds",
    "keras2clash/registry.py",
]
"""The packages mypy checks ([tool.mypy] in pyproject)."""


def test_mypy_checks_the_stages() -> None:
    mypy = Path(sys.executable).parent / "mypy"
    proc = subprocess.run([str(mypy), *TYPED], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
