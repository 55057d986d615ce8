"""The package's shape: the import contracts (pyproject's [tool.importlinter]) hold, every
module has its place in the stage order, the package's own modules are imported at module level
(but for the lazy imports the contracts list), and no stage outside `keras2clash/kinds`
switches on the name of a kind that has a home there."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from pathlib import Path

import keras2clash.kinds  # noqa: F401  (registers every kind)
from keras2clash.registry import kinds

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "keras2clash"
CONTRACTS = {
    c["id"]: c for c in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
}


def test_import_contracts_hold() -> None:
    lint = Path(sys.executable).parent / "lint-imports"
    proc = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in proc.stdout


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def test_every_module_has_a_place_in_the_stage_order() -> None:
    """The layers contract names every module of the package, itself or through its package,
    so a new module cannot sit outside the order (the package's own `__init__` and
    `__main__`, and the `__init__` of a package whose modules are placed one by one, aside)."""
    order = CONTRACTS["stage-order"]
    (container,) = order["containers"]
    placed = {f"{container}.{name.strip()}" for layer in order["layers"] for name in layer.replace(":", "|").split("|")}
    assert placed <= set(MODULES), f"layers naming no module: {sorted(placed - set(MODULES))}"
    unplaced = [
        name
        for name in MODULES
        if not any(name == p or name.startswith(p + ".") for p in placed)  # placed, or inside a placed package
        and not any(p.startswith(name + ".") for p in placed)  # a package whose modules are placed one by one
        and name != f"{container}.__main__"
    ]
    assert not unplaced, "modules missing from pyproject's stage-order contract: " + ", ".join(unplaced)


def _imported(importer: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The keras2clash modules an import statement in `importer` imports (`from package import
    module` names the module)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names if alias.name.split(".")[0] == "keras2clash"]
    base = node.module or ""
    if node.level:
        package = importer.split(".")
        if MODULES[importer].name != "__init__.py":
            package = package[:-1]
        base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
    if base.split(".")[0] != "keras2clash":
        return []
    return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]


def _function_level_imports() -> dict[str, list[str]]:
    """`importer -> imported` of every import of a keras2clash module made inside a function,
    with where each is made."""
    found: dict[str, list[str]] = {}
    for importer, path in MODULES.items():
        for function in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(function):
                if isinstance(node, (ast.Import, ast.ImportFrom)):
                    for module in _imported(importer, node):
                        where = f"{path.relative_to(ROOT)}:{node.lineno} ({function.name})"
                        found.setdefault(f"{importer} -> {module}", []).append(where)
    return found


def test_the_package_imports_its_modules_at_module_level() -> None:
    """An import of a keras2clash module inside a function hides where a stage stands (and a
    cycle, when it points up); only the lazy imports the contracts list, each with why, may
    be made there. Each listed one is made inside a function, so the list holds nothing else."""
    lazy = set(CONTRACTS["cli-commands-load-lazily"]["ignore_imports"])
    found = _function_level_imports()
    unlisted = [f"{where}: {imp}" for imp, places in sorted(found.items()) if imp not in lazy for where in places]
    assert not unlisted, (
        "keras2clash modules imported inside a function; import them at module level (or list a lazy one "
        "in pyproject's cli-commands-load-lazily contract, saying why):\n" + "\n".join(unlisted)
    )
    assert lazy <= set(found), f"listed as lazy but not imported inside a function: {sorted(lazy - set(found))}"


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
