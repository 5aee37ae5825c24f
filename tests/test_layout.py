"""The package's architecture, checked from its source: layers, cycles, one home for each fact.

Subpackages are layers (docs/PROTOCOL.md §13); an import may go to its own
subpackage or to a lower layer, never up — imports of the package root
(``from pyspark_fenced_sink import X``) count as imports of ``__init__``, the top
layer. The Spark-free core (``protocol``, ``store``) imports neither pyspark,
the executor path, nor the option parser. Executor-side modules never load
catalog code at import time. Every option key is spelled in ``options/`` only.
Every module path the package's docstrings and comments, docs/*.md and the README
name (``protocol.entry.WriteMode``, ``iceberg/commit/producers.py``) exists, and
docs/DEVELOPING.md's list of a write mode's places names every module that
decides by write mode.
Each rule is a function over an import graph, and the last tests feed every
rule a graph that breaks it: a rule that cannot fail is a defect.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "pyspark_fenced_sink"
DEVELOPING = PACKAGE.parent / "docs" / "DEVELOPING.md"
NAME = "pyspark_fenced_sink"

#: Lower numbers are lower layers. A module may import its own layer's modules and any lower layer.
LAYERS = {
    "errors": 0,
    "failpoints": 0,
    "logs": 0,
    "masking": 0,
    "version": 0,
    "store": 1,
    "protocol": 2,
    "options": 3,
    "iceberg": 4,
    "write": 5,
    "read": 5,
    "ops": 6,
    "spark": 7,
    "testing": 8,
    "__init__": 9,
    "demo": 10,  # a user's program: it uses the public API (the package root) as a user does
}
SPARK_FREE = ("store", "protocol")
#: Modules that run in Spark's Python workers (tasks): their module-level imports load no catalog code.
EXECUTOR_SIDE = (
    "write.task",
    "write.arrowcast",
    "write.transaction",  # unpickled with every writer; its catalog imports are inside driver-side methods
    "read.task",
    "read.files",
    "ops.compact_task",
    "spark.batch",
    "spark.streaming",
    "spark.messages",
    "spark.reader",
    "spark.stream_reader",
    "spark.datasource",
    "__init__",
)
CATALOG_CODE = ("iceberg.catalogs", "iceberg.commit")
CATALOG_PACKAGES = ("pyiceberg.catalog", "sqlalchemy")

Graph = Mapping[str, Iterable[str]]

#: Dotted names that begin like a module path but are Spark's or Iceberg's: the session's API (``spark.read``),
#: Spark's configuration keys (``spark.sql.execution.*``) and Iceberg's table properties (``write.parquet.*``).
FOREIGN_NAMES = re.compile(
    r"spark\.(?:read|readStream|range|createDataFrame|table|conf|dataSource|hadoop|jobGroup|local|ui|"
    r"sql\.(?:execution|parquet|python|session|shuffle|catalog|timeType))\b|(?:write|read)\.(?:parquet|metadata|split)\b"
)


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
    """Absolute names imported by ``path`` (``from x import y`` yields ``x.y``; ``from pkg import y`` too)."""
    tree = ast.parse(path.read_text())
    # Module level: the statements of the module body (an `if TYPE_CHECKING:` block's imports never run).
    nodes: list[ast.AST] = list(tree.body) if top_level_only else list(ast.walk(tree))
    names: list[str] = []
    for node in nodes:
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.extend(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _internal(names: Iterable[str], modules: Mapping[str, Path]) -> set[str]:
    """The package modules ``names`` import; a name of the package root itself is ``__init__``."""
    out = set()
    for name in names:
        if not name.startswith(NAME + "."):
            continue
        rel = name[len(NAME) + 1 :]
        while rel and rel not in modules and f"{rel}.__init__" not in modules:
            rel = rel.rpartition(".")[0]
        if rel:
            out.add(rel if rel in modules else f"{rel}.__init__")
        else:
            out.add("__init__")  # `from pyspark_fenced_sink import __version__`: the root package
    return out


def _graph(*, top_level_only: bool = False) -> dict[str, set[str]]:
    modules = _modules()
    return {m: _internal(_imports(p, top_level_only=top_level_only), modules) - {m} for m, p in modules.items()}


# ---------------------------------------------------------------- the rules, as functions over a graph


def unplaced_rooms(modules: Iterable[str]) -> list[str]:
    return sorted({_room(m) for m in modules} - set(LAYERS))


def upward_imports(graph: Graph) -> list[str]:
    violations = []
    for module, targets in graph.items():
        source = _room(module)
        for target in targets:
            room = _room(target)
            if room != source and LAYERS[room] >= LAYERS[source]:
                violations.append(f"{module} -> {target}")
    return sorted(violations)


def cycles(graph: Graph) -> list[str]:
    state: dict[str, int] = {}
    found: list[str] = []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                found.append(" -> ".join([*stack[stack.index(nxt) :], nxt]))
            elif nxt not in state:
                visit(nxt, [*stack, nxt])
        state[node] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    return found


def core_violations(raw_imports: Mapping[str, Iterable[str]]) -> list[str]:
    """Spark-free core modules importing pyspark, Spark glue, the executor path or the option parser."""
    banned = (f"{NAME}.spark", f"{NAME}.write", f"{NAME}.options")
    bad = []
    for module, names in raw_imports.items():
        if _room(module) in SPARK_FREE:
            bad.extend(f"{module} imports {n}" for n in names if n.split(".")[0] == "pyspark" or n.startswith(banned))
    return sorted(bad)


def executor_catalog_imports(graph: Graph, raw_imports: Mapping[str, Iterable[str]]) -> list[str]:
    """Executor-side modules whose module-level import closure reaches catalog code."""
    bad = []
    for start in EXECUTOR_SIDE:
        seen, todo = {start}, [start]
        while todo:
            module = todo.pop()
            hits = [n for n in raw_imports.get(module, ()) if n.startswith(CATALOG_PACKAGES)]
            if module.startswith(CATALOG_CODE) or hits:
                bad.append(f"{start} reaches {module}" + (f" ({hits[0]})" if hits else ""))
                continue
            for nxt in graph.get(module, ()):
                if nxt not in seen:
                    seen.add(nxt)
                    todo.append(nxt)
    return sorted(bad)


def _option_keys() -> set[str]:
    """String values of the option-key constants in options/ (``WRITER_ID = "writer.id"``, ...)."""
    keys = set()
    for path in (PACKAGE / "options").glob("*.py"):
        for node in ast.parse(path.read_text()).body:
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


def option_keys_elsewhere(strings: Mapping[str, Iterable[str]], keys: set[str]) -> list[str]:
    return sorted(f"{m}: {s!r}" for m, found in strings.items() if _room(m) != "options" for s in found if s in keys)


def _defined(path: Path) -> dict[str, set[str] | None]:
    """Top-level names of a module (defined or imported), each class with the names its body defines."""
    out: dict[str, set[str] | None] = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ClassDef):
            members = {n.id for s in node.body for n in ast.walk(s) if isinstance(n, ast.Name)}
            members |= {s.name for s in node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
            out[node.name] = members
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            out[node.name] = None
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.update(dict.fromkeys((a.asname or a.name).split(".")[0] for a in node.names))
        else:
            targets = (
                [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else getattr(node, "targets", ())
            )
            out.update(dict.fromkeys(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)))
    return out


def _resolves(name: str, modules: Mapping[str, Path]) -> bool:
    """True if ``name`` (``iceberg.commit.producers.PRODUCERS``) is a module, or a module and a name it defines."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        path = modules.get(".".join(parts[:i])) or modules.get(".".join([*parts[:i], "__init__"]))
        if path is not None:
            break
    else:
        return False
    rest = parts[i:]
    if not rest or (rest == ["py"] and ".".join(parts[:i]) in modules):  # a module, or its file name ("errors.py")
        return True
    defined = _defined(path)
    if rest[0] not in defined:
        return False
    members = defined[rest[0]]
    return len(rest) == 1 or members is None or rest[1] in members


def stale_module_paths(texts: Mapping[str, str], modules: Mapping[str, Path]) -> list[str]:
    """Module paths named in ``texts`` (where -> text) that name no module or no name in one.

    A name counts when it starts with the package (``pyspark_fenced_sink.``) or one of its rooms other than the
    demo (whose Iceberg namespace is ``demo``): dotted (``protocol.entry.WriteMode``) or a file path
    (``iceberg/commit/producers.py``, ``iceberg/codec/``).
    """
    rooms = "|".join(sorted({_room(m) for m in modules} - {"demo", "__init__"}))
    dotted = re.compile(rf"(?<![\w.\-/])(?:{NAME}\.)?(?:{rooms})(?:\.[A-Za-z_]\w*)+(?![\w-])")
    slashed = re.compile(rf"(?<![\w.\-/])(?:{NAME}/)?(?:{rooms})(?:/\w+)*(?:\.py|/)(?![\w/])")
    stale = []
    for where, text in texts.items():
        for found in dotted.finditer(text):
            name = found.group(0)
            if not FOREIGN_NAMES.match(name) and not _resolves(name.removeprefix(f"{NAME}."), modules):
                stale.append(f"{where}: {name}")
        for found in slashed.finditer(text):
            path = found.group(0).removeprefix(f"{NAME}/")
            module = path.removesuffix(".py").rstrip("/").replace("/", ".")
            if module not in modules and f"{module}.__init__" not in modules:
                stale.append(f"{where}: {found.group(0)}")
    return sorted(stale)


def _named_texts() -> dict[str, str]:
    """The package's strings and comments (docstrings among them), docs/*.md and the README, by file."""
    root = PACKAGE.parent
    texts = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
        words = (t.string for t in tokens if t.type in (tokenize.STRING, tokenize.COMMENT))
        texts[str(path.relative_to(root))] = "\n".join(words)
    for path in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
        texts[str(path.relative_to(root))] = path.read_text()
    return texts


def _names_a_write_mode(path: Path) -> bool:
    """True if the module's code names a ``WriteMode`` member (``WriteMode.DYNAMIC``)."""
    return any(
        isinstance(n, ast.Attribute)
        and isinstance(n.value, ast.Name)
        and n.value.id == "WriteMode"
        and n.attr.isupper()
        for n in ast.walk(ast.parse(path.read_text()))
    )


def unlisted_write_mode_places(naming: Iterable[str], guide: str) -> list[str]:
    """Modules (``protocol/entry.py``) in ``naming`` that the guide's "A write mode" list does not name."""
    _, found, rest = guide.partition("- **A write mode.**")
    listed = set(re.findall(r"`([\w/]+\.py)`", rest.split("\n- **", 1)[0])) if found else set()
    return sorted(set(naming) - listed)


# ---------------------------------------------------------------- the rules, on the code


def test_every_subpackage_and_module_has_a_layer() -> None:
    """A new room must be placed in the layer table before it can be used."""
    assert unplaced_rooms(_modules()) == []


def test_every_package_directory_is_a_regular_package() -> None:
    """A directory of modules without ``__init__.py`` is left out of the wheel (``packages = find:``)."""
    dirs = {path.parent for path in PACKAGE.rglob("*.py") if "__pycache__" not in path.parts}
    assert sorted(str(d.relative_to(PACKAGE)) for d in dirs if not (d / "__init__.py").exists()) == []


def test_no_import_runs_up_a_layer() -> None:
    """Imports (lazy ones inside functions, and imports of the package root, included) never go up a layer."""
    assert upward_imports(_graph()) == []


def test_the_package_root_is_imported_only_by_the_demo() -> None:
    """The root is the public API: only the demo (a user's program) imports it; anything else would run up."""
    assert sorted(m for m, targets in _graph().items() if "__init__" in targets) == ["demo"]


def test_module_level_imports_have_no_cycles() -> None:
    """The import graph of module-level imports is acyclic."""
    assert cycles(_graph(top_level_only=True)) == []


def test_the_spark_free_core_imports_neither_pyspark_nor_the_executor_path_nor_options() -> None:
    """``protocol`` and ``store`` import no pyspark, no Spark glue, no executor code and no option parsing."""
    raw = {m: _imports(p) for m, p in _modules().items()}
    assert core_violations(raw) == []


def test_executor_side_modules_load_no_catalog_code_at_import() -> None:
    """What Spark's Python workers import (and unpickle) never pulls in a catalog, even transitively."""
    modules = _modules()
    raw = {m: _imports(p, top_level_only=True) for m, p in modules.items()}
    assert set(EXECUTOR_SIDE) <= set(modules)
    assert executor_catalog_imports(_graph(top_level_only=True), raw) == []


def test_option_keys_are_spelled_only_in_options() -> None:
    """No module outside options/ has an option key as a string literal (dotted/dashed keys: unambiguous)."""
    keys = {k for k in _option_keys() if "." in k.strip(".") or "-" in k}
    assert {"writer.id", "writer.batch-id", "partition-by", "commit.max-wait-ms", "split-size"} <= keys
    strings = {m: _code_strings(p) for m, p in _modules().items()}
    assert option_keys_elsewhere(strings, keys) == []


def test_module_paths_named_in_docs_and_docstrings_exist() -> None:
    """Docstrings, comments, docs/*.md and the README name only modules (and names in them) that exist."""
    texts = _named_texts()
    assert {"README.md", "docs/PROTOCOL.md", "pyspark_fenced_sink/protocol/entry.py"} <= set(texts)
    assert stale_module_paths(texts, _modules()) == []


def test_every_module_deciding_by_write_mode_is_listed_for_a_new_write_mode() -> None:
    """docs/DEVELOPING.md lists a write mode's places: each module naming a ``WriteMode`` member is among them."""
    naming = [str(p.relative_to(PACKAGE)) for p in _modules().values() if _names_a_write_mode(p)]
    assert {"protocol/entry.py", "iceberg/commit/producers.py", "options/write.py"} <= set(naming)
    assert unlisted_write_mode_places(naming, DEVELOPING.read_text()) == []


# ---------------------------------------------------------------- every rule can fail


@pytest.mark.parametrize(
    ("graph", "expected"),
    [
        ({"protocol.commit": {"iceberg.commit.table_port"}}, ["protocol.commit -> iceberg.commit.table_port"]),
        ({"ops.cli_args": {"__init__"}}, ["ops.cli_args -> __init__"]),
        ({"store.s3": {"options.catalog"}}, ["store.s3 -> options.catalog"]),
        ({"write.task": {"write.arrowcast"}, "spark.batch": {"write.transaction"}}, []),
    ],
)
def test_the_layer_rule_catches_an_upward_import(graph: dict[str, set[str]], expected: list[str]) -> None:
    """Synthetic graphs: an import up a layer (or of the root) is reported; a downward one is not."""
    assert upward_imports(graph) == expected


def test_the_root_import_is_seen_as_an_import_of_init() -> None:
    """``from pyspark_fenced_sink import __version__`` resolves to ``__init__``, not to nothing."""
    assert _internal([f"{NAME}.__version__"], _modules()) == {"__init__"}
    assert _internal([f"{NAME}.failpoints"], _modules()) == {"failpoints"}


def test_the_cycle_rule_catches_a_cycle() -> None:
    """A two-module loop is reported."""
    assert cycles({"a": {"b"}, "b": {"a"}}) == ["a -> b -> a"]


def test_the_core_rule_catches_pyspark_and_options() -> None:
    """The core importing pyspark or the option parser is reported."""
    raw = {"protocol.x": ["pyspark.sql", f"{NAME}.options.write.SinkOptions"], "ops.y": ["pyspark.sql"]}
    assert core_violations(raw) == [
        "protocol.x imports pyspark.sql",
        f"protocol.x imports {NAME}.options.write.SinkOptions",
    ]


def test_the_executor_rule_catches_a_transitive_catalog_import() -> None:
    """An executor module reaching catalog code through another module is reported."""
    graph = {"write.task": {"iceberg.codec.datafiles"}, "iceberg.codec.datafiles": {"iceberg.catalogs"}}
    assert executor_catalog_imports(graph, {}) == ["write.task reaches iceberg.catalogs"]
    assert executor_catalog_imports({"read.files": set()}, {"read.files": ["pyiceberg.catalog.sql.SqlCatalog"]}) == [
        "read.files reaches read.files (pyiceberg.catalog.sql.SqlCatalog)"
    ]


def test_the_option_key_rule_catches_a_key_outside_options() -> None:
    """A key spelled in another module is reported; in options/ it is not."""
    strings = {"write.transaction": ["writer.id"], "options.write": ["writer.id"]}
    assert option_keys_elsewhere(strings, {"writer.id"}) == ["write.transaction: 'writer.id'"]


@pytest.mark.parametrize(
    ("text", "stale"),
    [
        ("the port (``iceberg.table_port``) commits", ["iceberg.table_port"]),
        (
            "see pyspark_fenced_sink.iceberg.commit.table_port.NoSuchPort",
            ["pyspark_fenced_sink.iceberg.commit.table_port.NoSuchPort"],
        ),
        ("a row of `iceberg/commit/producer.py`", ["iceberg/commit/producer.py"]),
        ("``protocol.entry.WriteMode.NO_SUCH_MODE``", ["protocol.entry.WriteMode.NO_SUCH_MODE"]),
        ("protocol.entry.WriteMode.DYNAMIC in iceberg/commit/producers.py, options/, errors.py", []),
        ("spark.read.format, spark.sql.execution.arrow.maxBytesPerBatch, write.parquet.row-group-limit", []),
    ],
)
def test_the_module_path_rule_catches_a_stale_name(text: str, stale: list[str]) -> None:
    """A planted name of a module (or of a name in one) that does not exist is reported; live ones are not."""
    assert stale_module_paths({"planted": text}, _modules()) == [f"planted: {name}" for name in stale]


def test_the_write_mode_rule_catches_an_unlisted_module() -> None:
    """A module deciding by write mode that the guide's list leaves out is reported (another section's is not)."""
    guide = (
        "- **A write mode.** `protocol/entry.py` and\n  `protocol/replace.py`\n- **A catalog.** `options/write.py`\n"
    )
    naming = ["protocol/entry.py", "protocol/replace.py", "options/write.py"]
    assert unlisted_write_mode_places(naming, guide) == ["options/write.py"]
    assert unlisted_write_mode_places(naming, "no such list") == sorted(naming)
