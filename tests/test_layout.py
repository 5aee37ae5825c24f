"""The package's architecture, checked from its source: layers, cycles, one home for each fact.

Subpackages are layers (docs/PROTOCOL.md, "Code layout"); an import may go to
its own subpackage or to a lower layer, never up. The Spark-free core
(``protocol``, ``store``) imports neither pyspark nor the executor path. Every
option key is spelled in ``options.py`` only.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pyspark_fenced_sink"
NAME = "pyspark_fenced_sink"

#: Lower numbers are lower layers. A module may import its own layer's modules and any lower layer.
LAYERS = {
    "errors": 0,
    "failpoints": 0,
    "logs": 0,
    "options": 1,
    "store": 2,
    "protocol": 3,
    "iceberg": 4,
    "write": 5,
    "read": 5,
    "ops": 6,
    "spark": 7,
    "testing": 8,
    "demo": 8,
    "__init__": 9,
}
SPARK_FREE = ("store", "protocol")


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        out[".".join(parts)] = path
    return out


def _room(module: str) -> str:
    """The layer key of a module: its subpackage, or its own name at the top level."""
    return module.split(".", 1)[0]


def _imports(path: Path, *, top_level_only: bool = False) -> list[str]:
    """Absolute names imported by ``path`` (``from x import y`` also yields ``x.y``)."""
    tree = ast.parse(path.read_text())
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    names: list[str] = []
    for node in nodes:
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names.extend(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _internal(names: list[str], modules: dict[str, Path]) -> set[str]:
    out = set()
    for name in names:
        if name == NAME or not name.startswith(NAME + "."):
            continue
        rel = name[len(NAME) + 1 :]
        while rel and rel not in modules and f"{rel}.__init__" not in modules:
            rel = rel.rpartition(".")[0]
        if rel:
            out.add(rel if rel in modules else f"{rel}.__init__")
    return out


def test_every_subpackage_and_module_has_a_layer() -> None:
    """A new room must be placed in the layer table before it can be used."""
    rooms = {_room(m) for m in _modules()}
    assert sorted(rooms - set(LAYERS)) == []


def test_no_import_runs_up_a_layer() -> None:
    """Imports (including lazy ones inside functions) go to the same subpackage or a lower layer."""
    modules = _modules()
    violations = []
    for module, path in modules.items():
        source = _room(module)
        for target in _internal(_imports(path), modules):
            room = _room(target)
            if room != source and LAYERS[room] >= LAYERS[source]:
                violations.append(f"{module} -> {target}")
    assert violations == []


def test_module_level_imports_have_no_cycles() -> None:
    """The import graph of module-level imports is acyclic."""
    modules = _modules()
    graph = {m: _internal(_imports(p, top_level_only=True), modules) - {m} for m, p in modules.items()}
    state: dict[str, int] = {}
    cycles: list[str] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join([*stack[stack.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


@pytest.mark.parametrize("room", SPARK_FREE)
def test_the_spark_free_core_imports_neither_pyspark_nor_the_executor_path(room: str) -> None:
    """``protocol`` and ``store`` import no pyspark, no Spark glue and no executor code, even lazily."""
    bad = []
    for module, path in _modules().items():
        if _room(module) != room:
            continue
        for name in _imports(path):
            if name.split(".")[0] == "pyspark" or name.startswith((f"{NAME}.spark", f"{NAME}.write")):
                bad.append(f"{module} imports {name}")
    assert bad == []


def _option_keys() -> set[str]:
    """String values of the option-key constants in options.py (``WRITER_ID = "writer.id"``, ...)."""
    tree = ast.parse((PACKAGE / "options.py").read_text())
    keys = set()
    for node in tree.body:
        if (
            isinstance(node, ast.Assign)
            and len(node.targets) == 1
            and isinstance(node.targets[0], ast.Name)
            and node.targets[0].id.isupper()
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
            and not node.targets[0].id.endswith(("_ENV", "_DEFAULT"))
        ):
            keys.add(node.value.value)
    return keys


def _code_strings(path: Path) -> list[str]:
    """String literals of a module that are not docstrings."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def test_option_keys_are_spelled_only_in_options_py() -> None:
    """No module but options.py has an option key as a string literal (dotted/dashed keys: unambiguous)."""
    keys = {k for k in _option_keys() if "." in k.strip(".") or "-" in k}
    assert {"writer.id", "writer.batch-id", "partition-by", "commit.max-wait-ms"} <= keys
    found = []
    for module, path in _modules().items():
        if module == "options":
            continue
        found.extend(f"{module}: {s!r}" for s in _code_strings(path) if s in keys)
    assert found == []
