"""The repository's run data and its lab stay small and accounted for (docs/decisions.md, "Run data
lives in data/ under a cap" and "bench/ measures; nothing there ships"): data/ under its cap with
every file named in data/README.md, the stored gemm-kernel-gpu programs still valid programs and
their sweeps readable; bench/ under a megabyte, scripts only, each named in bench/README.md, every
name a script imports still there (read from the sources, never by importing a script), and no
other test reaching into it."""

from __future__ import annotations

import ast
import importlib.util
import json
import lzma
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from codevolve.problems.gemm_kernel_gpu.static_check import check_source

ROOT = Path(__file__).resolve().parents[3]
SRC = ROOT / "src"
DATA = ROOT / "data"
BENCH = ROOT / "bench"
DATA_CAP_BYTES = 2 * 1024 * 1024
BENCH_CAP_BYTES = 1024 * 1024
SCRIPT_SUFFIXES = (".py", ".sh")


def _files(folder: Path) -> list[Path]:
    return sorted(path for path in folder.rglob("*") if path.is_file())


def test_data_stays_under_its_cap() -> None:
    size = sum(path.stat().st_size for path in _files(DATA))
    assert 0 < size <= DATA_CAP_BYTES, f"data/ holds {size} bytes, over {DATA_CAP_BYTES}"


def test_every_data_file_is_named_in_its_readme() -> None:
    readme = (DATA / "README.md").read_text()
    unnamed = [
        str(path.relative_to(DATA))
        for path in _files(DATA)
        if path.name != "README.md" and f"`{path.name}`" not in readme
        and f"/{path.name}`" not in readme
    ]  # fmt: skip
    assert not unnamed, f"data/README.md does not name {unnamed}"


@pytest.mark.parametrize(
    "path", sorted((DATA / "gemm_kernel_gpu").glob("*.txt")), ids=lambda path: path.stem
)
def test_the_stored_gemm_kernel_programs_pass_the_static_check(path: Path) -> None:
    assert check_source(path.read_text()) == ""


def test_the_stored_sweeps_read_as_sweep_reports() -> None:
    sweeps = sorted((DATA / "gemm_kernel_gpu" / "sweeps").glob("*.json.xz"))
    assert len(sweeps) == 16
    for path in sweeps:
        with lzma.open(path, "rt") as compressed:
            report = json.load(compressed)
        assert report["shapes"] and report["samples"] > 0, path.name
        assert bool(report.get("heldout")) == ("heldout" in path.name), path.name


def test_bench_holds_only_listed_scripts_under_a_megabyte() -> None:
    files = _files(BENCH)
    size = sum(path.stat().st_size for path in files)
    assert size <= BENCH_CAP_BYTES, f"bench/ holds {size} bytes, over {BENCH_CAP_BYTES}"
    readme = (BENCH / "README.md").read_text()
    others = [
        str(path.relative_to(BENCH))
        for path in files
        if path.name != "README.md" and (path.parent != BENCH or path.suffix not in SCRIPT_SUFFIXES)
    ]
    assert not others, f"bench/ holds more than scripts: {others}"
    unlisted = [path.name for path in files if path.name != "README.md"]
    unlisted = [name for name in unlisted if f"`{name}`" not in readme]
    assert not unlisted, f"bench/README.md does not list {unlisted}"


# A path into bench/ built in code, or an import of a bench script; a mention in prose is fine.
REACHES_INTO_BENCH = re.compile(r"""["']bench["']|["']bench/|^\s*(from|import)\s+bench\b""", re.M)


def test_no_test_reaches_into_bench() -> None:
    reaching = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if path != Path(__file__).resolve() and REACHES_INTO_BENCH.search(path.read_text())
    ]
    assert not reaching, f"tests reach into bench/: {reaching}"


# Packages a bench script may import that only a GPU machine installs.
DEVICE_ONLY_PACKAGES = frozenset({"triton"})
# Handlers whose imports are fallbacks for running a script against an older tree.
IMPORT_ERRORS = frozenset({"ImportError", "ModuleNotFoundError"})
DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _module_file(dotted: str) -> Path | None:
    """The source of a ``codevolve`` module, or None when the package has no such module."""
    base = SRC.joinpath(*dotted.split("."))
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)


def _top_level(statements: list[ast.stmt]) -> Iterator[ast.AST]:
    """A module's statements, with those nested in if, try, with and for blocks but not in
    functions or classes."""
    for node in statements:
        yield node
        if not isinstance(node, DEFINITIONS):
            for block in ("body", "orelse", "finalbody", "handlers"):
                yield from _top_level(getattr(node, block, []))


def _bound_names(path: Path) -> set[str]:
    """The names a module binds at its top level: definitions, assignments and imports."""
    names: set[str] = set()
    for node in _top_level(ast.parse(path.read_text()).body):
        if isinstance(node, DEFINITIONS):
            names.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update(a.asname or a.name.partition(".")[0] for a in node.names)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign | ast.For):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


def _catches_import_errors(handler: ast.ExceptHandler) -> bool:
    kinds = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(k, ast.Name) and k.id in IMPORT_ERRORS for k in kinds)


def _imports(node: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import in a script, at any depth, but for the fallbacks under ``except
    ImportError``."""
    if isinstance(node, ast.Import | ast.ImportFrom):
        yield node
    for child in ast.iter_child_nodes(node):
        if not (isinstance(child, ast.ExceptHandler) and _catches_import_errors(child)):
            yield from _imports(child)


def _missing(module: str, name: str | None, modules: dict[str, Path], alias: str) -> str:
    """Why ``from module import name`` (or ``import module``) no longer works, or "" when it
    does; a ``codevolve`` module it binds goes into ``modules`` under ``alias``."""
    top = module.partition(".")[0]
    if top == "codevolve":
        source = _module_file(module)
        if source is None:
            return f"no module {module}"
        if name is None:
            modules[alias] = source
        elif (submodule := _module_file(f"{module}.{name}")) is not None:
            modules[alias] = submodule
        elif name not in _bound_names(source):
            return f"{module} has no {name}"
    elif (BENCH / f"{top}.py").is_file():  # a sibling script, which bench/ puts on sys.path
        if name is not None and name not in _bound_names(BENCH / f"{top}.py"):
            return f"bench/{top}.py has no {name}"
    elif top not in DEVICE_ONLY_PACKAGES and importlib.util.find_spec(top) is None:
        return f"{module} is no codevolve module, bench script or installed package"
    return ""


def _rotten_imports(script: Path) -> list[str]:
    """What ``script`` imports that is gone: a ``codevolve`` module or a name it does not define,
    an attribute read from an imported ``codevolve`` module that it does not define, a sibling
    bench script or a name it does not define, a package that is not installed."""
    tree = ast.parse(script.read_text())
    problems: list[str] = []
    modules: dict[str, Path] = {}  # a name in the script -> the codevolve module bound to it
    for node in _imports(tree):
        if isinstance(node, ast.Import):
            pairs = [(a.name, None, a.asname or a.name) for a in node.names]
        elif node.module and not node.level:
            pairs = [(node.module, a.name, a.asname or a.name) for a in node.names]
        else:  # relative: bench/ is no package
            pairs = []
        for module, name, alias in pairs:
            if why := _missing(module, name, modules, alias):
                problems.append(f"{script.name}:{node.lineno}: {why}")
    rebound = {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    } | {a.arg for a in ast.walk(tree) if isinstance(a, ast.arg)}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Load)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules.keys() - rebound
            and node.attr not in _bound_names(modules[node.value.id])
        ):
            problems.append(f"{script.name}:{node.lineno}: {node.value.id} has no {node.attr}")
    return list(dict.fromkeys(problems))  # one line per module, however many names


@pytest.mark.parametrize("script", sorted(BENCH.glob("*.py")), ids=lambda path: path.stem)
def test_every_name_a_bench_script_imports_still_exists(script: Path) -> None:
    rotten = _rotten_imports(script)
    assert not rotten, f"bench/{script.name} imports what is gone: " + "; ".join(rotten)
