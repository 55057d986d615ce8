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
    "keras2clash/train",
    "keras2clash/registry.py",
]
"""The packages mypy checks ([tool.mypy] in pyproject)."""


def test_mypy_checks_the_stages() -> None:
    mypy = Path(sys.executable).parent / "mypy"
    proc = subprocess.run([str(mypy), *TYPED], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


NO_ANY_PACKAGES = ("ir", "quant", "hw", "backend", "kinds")
"""The packages whose public signatures never say `Any` (mypy checks them too, `TYPED`)."""


def _says_any(node: ast.expr | None) -> bool:
    """Whether an annotation (or a type alias's value) names `Any`: as `Any`, `typing.Any`,
    or inside a string annotation; `Literal["Any"]` is a string, not the type."""
    if node is None:
        return False
    if isinstance(node, ast.Name):
        return node.id == "Any"
    if isinstance(node, ast.Attribute):
        return node.attr == "Any"
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        try:
            return _says_any(ast.parse(node.value, mode="eval").body)
        except SyntaxError:
            return False
    if isinstance(node, ast.Subscript) and isinstance(node.value, (ast.Name, ast.Attribute)):
        if (node.value.id if isinstance(node.value, ast.Name) else node.value.attr) == "Literal":
            return False
    return any(_says_any(child) for child in ast.iter_child_nodes(node) if isinstance(child, ast.expr))


def _public(name: str) -> bool:
    """A public name; dunder methods (`__getattr__`, `__call__`) are public API too."""
    return not name.startswith("_") or (name.startswith("__") and name.endswith("__"))


def _any_in_public_signatures(tree: ast.Module) -> list[tuple[int, str]]:
    """(line, what) for every `Any` in a public function's parameters or return type, a public
    class's public methods and fields (recursively), or a public module-level name's annotation
    or type alias."""
    found: list[tuple[int, str]] = []

    def function(node: ast.FunctionDef | ast.AsyncFunctionDef, where: str) -> None:
        args = node.args
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]:
            if arg is not None and _says_any(arg.annotation):
                found.append((arg.lineno, f"parameter {arg.arg!r} of {where}{node.name}"))
        if _says_any(node.returns):
            found.append((node.lineno, f"return type of {where}{node.name}"))

    def body(statements: list[ast.stmt], where: str) -> None:
        for node in statements:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if _public(node.name):
                    function(node, where)
            elif isinstance(node, ast.ClassDef):
                if not node.name.startswith("_"):
                    body(node.body, f"{where}{node.name}.")
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                alias = isinstance(node.annotation, ast.Name) and node.annotation.id == "TypeAlias"
                if not node.target.id.startswith("_") and (
                    _says_any(node.annotation) or (alias and _says_any(node.value))
                ):
                    found.append((node.lineno, f"{where}{node.target.id}"))
            elif isinstance(node, ast.Assign):
                names = [t.id for t in node.targets if isinstance(t, ast.Name) and not t.id.startswith("_")]
                if names and _says_any(node.value):
                    found.append((node.lineno, f"{where}{names[0]}"))
            elif isinstance(node, getattr(ast, "TypeAlias", ())):  # `type X = ...` (Python 3.12)
                if not node.name.id.startswith("_") and _says_any(node.value):
                    found.append((node.lineno, f"{where}{node.name.id}"))
            elif isinstance(node, (ast.If, ast.Try)):  # `if TYPE_CHECKING:`, `try: import ...`
                body(node.body, where)
                body(node.orelse, where)
                for handler in getattr(node, "handlers", []):
                    body(handler.body, where)
                body(getattr(node, "finalbody", []), where)

    body(tree.body, "")
    return found


def test_the_any_check_sees_public_signatures_only() -> None:
    source = """
from typing import Any, Literal, TypeAlias
import typing

def f(x: Any, *rest: "list[Any]") -> int: ...
def g() -> typing.Any: ...
def _private(x: Any) -> Any: ...
def h(mode: Literal["Any"]) -> None:
    local: Any = 1
class C:
    field: dict[str, Any]
    def m(self, **kw: Any) -> None: ...
    def __getattr__(self, name: str) -> Any: ...
    def _m(self) -> Any: ...
class _Hidden:
    def m(self) -> Any: ...
Alias: TypeAlias = "dict[str, Any]"
Old = dict[str, Any]
_private_alias = dict[str, Any]
if True:
    def k() -> Any: ...
"""
    lines = [line for line, _ in _any_in_public_signatures(ast.parse(source))]
    assert lines == [5, 5, 6, 11, 12, 13, 17, 18, 21]


def test_no_any_in_public_signatures() -> None:
    """ir, quant and backend say what their public functions take and give: JSON as
    `jsontypes.Json`, the dictionary IR as `ir.graph.DictIR`, fixed layouts as TypedDicts."""
    assert all(f"keras2clash/{package}" in TYPED for package in NO_ANY_PACKAGES)
    found = []
    for package in NO_ANY_PACKAGES:
        for path in sorted((PACKAGE / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            found += [f"{path.relative_to(ROOT)}:{line}: {what}" for line, what in _any_in_public_signatures(tree)]
    assert not found, "Any in public signatures:\n" + "\n".join(found)
