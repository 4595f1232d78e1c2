"""Which files of a problem folder go into its bundle: what the evaluator needs, nothing else.

A real OpenEvolve folder also holds plots, earlier outputs, other configs and saved best
programs; shipping them all to every sandboxed evaluation is slow and can pass the bundle's caps.
The selection, decided per file (see docs/openevolve.md):

1. never bundled, not even looked at: VCS and cache folders, virtualenvs, ``*.pyc``, links;
2. always bundled: ``initial_program.*``, ``evaluator.py``, ``config.yaml``;
3. ``.codevolveignore`` (``ignore.py``): its last matching line puts a file out or, with ``!``, in;
4. otherwise followed from ``evaluator.py`` and the initial program, transitively through the
   Python files they bring in: local modules they import and files or folders their string
   literals name (``references.py``); a named folder brings its files but images and earlier
   outputs (``DEFAULT_LEFT_OUT``);
5. everything else is left out and reported in one warning line, largest first.

The selection then has to fit the caps of ``bundle.py``; an error names the largest files and
the ``.codevolveignore`` line that would leave each out. Nothing here imports or runs user code.
"""

from __future__ import annotations

import os
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from codevolve.core.pysource import parse_python
from codevolve.problems.openevolve.api_keys import literal_keys
from codevolve.problems.openevolve.bundle import (
    CONFIG,
    EVALUATOR,
    INITIAL_STEM,
    MAX_BUNDLE_BYTES,
    MAX_FILE_BYTES,
    MAX_FILES,
    Bundle,
    BundleError,
    make_bundle,
)
from codevolve.problems.openevolve.ignore import (
    IGNORE_FILE,
    PatternError,
    Rule,
    decision,
    glob_regex,
    has_magic,
    parse_rules,
)
from codevolve.problems.openevolve.references import references

NEVER_DIRS = frozenset(
    {".git", ".hg", ".svn", ".bzr", "__pycache__", ".ipynb_checkpoints", ".mypy_cache",
     ".pytest_cache", ".ruff_cache", ".tox", ".nox", ".venv", "node_modules"}
)  # fmt: skip
VENV_MARKER = "pyvenv.cfg"  # a folder holding it is a virtualenv, whatever its name
NEVER_SUFFIXES = frozenset({".pyc", ".pyo"})
NEVER_NAMES = frozenset({IGNORE_FILE, ".DS_Store"})
MAX_WALKED = 20_000  # files looked at in one folder: more means a wrong folder
IMAGE = "image"
EARLIER_OUTPUT = "earlier output"
NOT_REFERENCED = "not referenced"
DEFAULT_LEFT_OUT = {
    IMAGE: parse_rules("*.png\n*.jpg\n*.jpeg\n*.gif\n*.svg\n*.pdf\n*.bmp\n*.webp\n*.tif\n*.tiff"),
    EARLIER_OUTPUT: parse_rules(
        "openevolve_output/\nbest_program*.py\nbest_program_info.json\n*.log"
    ),
}  # left out of named folders; a file named by itself is bundled all the same
SHOWN = 6  # left-out entries named in the warning


@dataclass(frozen=True, slots=True)
class LeftOut:
    """A file of the folder not bundled; ``path`` ends in '/' for a whole folder left out."""

    path: str
    size: int  # bytes
    reason: str  # NOT_REFERENCED, IMAGE, EARLIER_OUTPUT
    files: int = 1


@dataclass(frozen=True, slots=True)
class Selection:
    """A folder's bundle and what the automatic selection left out of it."""

    bundle: Bundle
    left_out: tuple[LeftOut, ...]  # largest first; not what .codevolveignore excluded
    ignore_file: Path
    # variable -> key, for the keys config.yaml writes out (the bundle holds only references)
    api_keys: Mapping[str, str] = field(default_factory=dict, repr=False)

    def warning(self) -> str | None:
        """One line naming what was left out, or None when nothing was."""
        if not self.left_out:
            return None
        count = sum(item.files for item in self.left_out)
        total = sum(item.size for item in self.left_out)
        shown = ", ".join(_described(item) for item in self.left_out[:SHOWN])
        more = len(self.left_out) - SHOWN
        return (
            f"left out of the bundle: {count} file{'s' if count != 1 else ''} "
            f"({_size(total)}) that neither {EVALUATOR} nor the initial program refers to: "
            f"{shown}{f' and {more} more' if more > 0 else ''}; to bundle one anyway, add the "
            f'line "!PATH" to {self.ignore_file}'
        )


def load_folder(path: Path, *, config: Path | None = None) -> Bundle:
    """The bundle of a problem folder; ``config`` replaces its ``config.yaml``."""
    return select_folder(path, config=config).bundle


def select_folder(path: Path, *, config: Path | None = None) -> Selection:
    """Select a problem folder's files (see the module's docstring) and bundle them."""
    if not path.is_dir():
        raise BundleError(f"{path}: not a directory")
    ignore_file = path / IGNORE_FILE
    rules = _rules(ignore_file)
    sizes = _walk(path, rules, ignore_file)
    chosen = _Tracer(path, sizes, rules).chosen()
    _check_caps(chosen, sizes, ignore_file)
    files = {name: _read(path / name) for name in chosen}
    used = set(chosen)
    if config is not None:
        try:
            files[CONFIG] = config.read_bytes()
        except OSError as exc:
            raise BundleError(f"{config}: cannot read the config file ({exc})") from exc
        if config.resolve().is_relative_to(path.resolve()):  # bundled as config.yaml
            used.add(config.resolve().relative_to(path.resolve()).as_posix())
    left = [
        (name, size, reason)
        for name, size in sizes.items()
        if name not in used and (reason := _reason(rules, name)) is not None
    ]
    config_bytes = files.get(CONFIG, b"")
    keys = literal_keys(config_bytes.decode("utf-8", errors="replace"))
    return Selection(make_bundle(files), _grouped(left, chosen), ignore_file, keys)


def _read(file: Path) -> bytes:
    try:
        return file.read_bytes()
    except OSError as exc:
        raise BundleError(f"{file}: cannot be read ({exc.strerror or exc})") from exc


def _rules(ignore_file: Path) -> tuple[Rule, ...]:
    if not ignore_file.is_file():
        return ()
    try:
        return parse_rules(ignore_file.read_text(encoding="utf-8"))
    except (PatternError, UnicodeDecodeError) as exc:
        raise BundleError(f"{ignore_file}: {exc}") from exc


def _walk(folder: Path, rules: tuple[Rule, ...], ignore_file: Path) -> dict[str, int]:
    """Relative POSIX path -> size in bytes of every file that may be bundled."""
    prunable = not any(rule.include for rule in rules)
    sizes: dict[str, int] = {}
    for root, dirs, names in os.walk(folder):
        here = Path(root)
        base = here.relative_to(folder).as_posix()
        prefix = "" if base == "." else f"{base}/"
        dirs[:] = sorted(
            name
            for name in dirs
            if name not in NEVER_DIRS
            and not (here / name).is_symlink()
            and not (here / name / VENV_MARKER).exists()
            and not (prunable and _excluded(rules, f"{prefix}{name}/-"))
        )
        for name in names:
            file = here / name
            if name in NEVER_NAMES or file.suffix in NEVER_SUFFIXES or file.is_symlink():
                continue
            if file.is_file():
                sizes[prefix + name] = file.stat().st_size
        if len(sizes) > MAX_WALKED:
            raise BundleError(
                f"{folder}: more than {MAX_WALKED} files; is it the problem folder? Leave out "
                f'big folders with lines such as "/outputs/" in {ignore_file}'
            )
    return sizes


def _excluded(rules: tuple[Rule, ...], path: str) -> bool:
    rule = decision(rules, path)
    return rule is not None and not rule.include


class _Tracer:
    """Follows references from the required files; ``chosen`` maps each bundled file to why."""

    def __init__(self, folder: Path, sizes: Mapping[str, int], rules: tuple[Rule, ...]) -> None:
        self._root = folder
        self._sizes = sizes
        self._rules = rules
        self._folders = {str(p) for name in sizes for p in PurePosixPath(name).parents} - {"."}
        self._why: dict[str, str] = {}
        self._pending: list[str] = []

    def chosen(self) -> dict[str, str]:
        for name in self._sizes:
            if "/" not in name and (name in (EVALUATOR, CONFIG) or _is_initial(name)):
                self._add(name, "required", forced=True)
            elif (rule := decision(self._rules, name)) is not None and rule.include:
                self._add(name, f"{IGNORE_FILE} line {rule.line} includes it", forced=True)
        while self._pending:
            self._follow(self._pending.pop())
        return self._why

    def _add(self, name: str, why: str, *, forced: bool = False) -> None:
        if name in self._why or (not forced and _excluded(self._rules, name)):
            return
        self._why[name] = why
        if name.endswith(".py"):
            self._pending.append(name)

    def _follow(self, source: str) -> None:
        if self._sizes[source] > MAX_FILE_BYTES:
            return  # too big to bundle anyway: the caps name it
        try:
            text = (self._root / source).read_text(encoding="utf-8")
            tree = parse_python(text, filename=source)
        except (OSError, SyntaxError, ValueError):
            return  # reading it names an unreadable file, make_bundle a broken evaluator
        parent = posixpath.dirname(source)
        found = references(tree, package=parent.replace("/", "."))
        for module in sorted(found.modules):
            for name in _module_files(module):
                if name in self._sizes:
                    self._add(name, f"{source} imports it")
        for literal in sorted(found.paths):  # files first: their reason is the precise one
            for name in _candidates(literal, source):
                self._file(name, source)
        for literal in sorted(found.paths | found.folders):
            for name in _candidates(literal, source):
                self._folder(name, source)

    def _file(self, name: str, source: str) -> None:
        if has_magic(name):
            pattern = re.compile(glob_regex(name, anchored=True))
            for match in (n for n in self._sizes if pattern.fullmatch(n)):
                self._add(match, f"{source} refers to {name!r}")
        elif name in self._sizes:
            self._add(name, f"{source} refers to it")

    def _folder(self, name: str, source: str) -> None:
        if name in self._folders:
            for inner in (n for n in self._sizes if n.startswith(f"{name}/")):
                if _default_reason(inner) is None:
                    self._add(inner, f"{source} refers to folder {name}")


def _is_initial(name: str) -> bool:
    return PurePosixPath(name).stem == INITIAL_STEM


def _candidates(literal: str, source: str) -> set[str]:
    """What a literal of ``source`` may name: relative to the folder (the evaluator's working
    directory) or to ``source``'s own folder; never outside the folder."""
    if literal.startswith("/") or "\\" in literal:
        return set()
    bases = ("", posixpath.dirname(source))
    names = {posixpath.normpath(posixpath.join(base, literal)) for base in bases}
    return {name for name in names if name not in (".", "..") and not name.startswith("../")}


def _module_files(module: str) -> list[str]:
    """Where a dotted module of the folder would live, with its packages' ``__init__.py``."""
    parts = module.split(".")
    names = ["/".join([*parts[:end], "__init__.py"]) for end in range(1, len(parts) + 1)]
    return [*names, "/".join(parts) + ".py"]


def _default_reason(name: str) -> str | None:
    for reason, rules in DEFAULT_LEFT_OUT.items():
        if decision(rules, name) is not None:
            return reason
    return None


def _reason(rules: tuple[Rule, ...], name: str) -> str | None:
    """Why the selection left ``name`` out; None when .codevolveignore said so (no report)."""
    if _excluded(rules, name):
        return None
    return _default_reason(name) or NOT_REFERENCED


def _grouped(left: list[tuple[str, int, str]], chosen: Mapping[str, str]) -> tuple[LeftOut, ...]:
    """Left-out files; a top-level folder none of whose files was chosen is one entry."""
    kept = {name.split("/")[0] for name in chosen if "/" in name}
    folders: dict[str, list[tuple[str, int, str]]] = {}
    items: list[LeftOut] = []
    for name, size, reason in left:
        top = name.split("/")[0]
        if "/" in name and top not in kept:
            folders.setdefault(top, []).append((name, size, reason))
        else:
            items.append(LeftOut(name, size, reason))
    for top, inner in folders.items():
        if len(inner) == 1:
            items.append(LeftOut(*inner[0]))
            continue
        reasons = {reason for _, _, reason in inner}
        reason = reasons.pop() if len(reasons) == 1 else NOT_REFERENCED
        size = sum(size for _, size, _ in inner)
        items.append(LeftOut(f"{top}/", size, reason, files=len(inner)))
    return tuple(sorted(items, key=lambda item: (-item.size, item.path)))


def _check_caps(chosen: Mapping[str, str], sizes: Mapping[str, int], ignore_file: Path) -> None:
    """BundleError naming the largest files when the selection passes a cap of ``bundle.py``."""
    largest = sorted(chosen, key=lambda name: (-sizes[name], name))
    if len(chosen) > MAX_FILES:
        raise BundleError(
            f"{ignore_file.parent}: {len(chosen)} files selected, more than the {MAX_FILES} a "
            f"bundle may hold; leave out what the evaluator does not need with lines such as "
            f'"/{largest[0].split("/")[0]}" in {ignore_file}'
        )
    name = largest[0] if largest else ""
    if largest and sizes[name] > MAX_FILE_BYTES:
        raise BundleError(
            f"{name}: {_size(sizes[name])}, more than the {_size(MAX_FILE_BYTES)} one bundle "
            f"file may hold ({chosen[name]}); make it smaller, or if the evaluator does not "
            f'need it, add the line "/{name}" to {ignore_file}'
        )
    total = sum(sizes[name] for name in chosen)
    if total > MAX_BUNDLE_BYTES:
        named = ", ".join(f"{n} ({_size(sizes[n])}, {chosen[n]})" for n in largest[:3])
        raise BundleError(
            f"{ignore_file.parent}: the selected files come to {_size(total)}, more than the "
            f"{_size(MAX_BUNDLE_BYTES)} a bundle may hold; largest: {named}; leave out what "
            f'the evaluator does not need with lines such as "/{name}" in {ignore_file}'
        )


def _described(item: LeftOut) -> str:
    count = f"{item.files} files, " if item.files > 1 else ""
    return f"{item.path} ({count}{_size(item.size)}, {item.reason})"


def _size(size: int) -> str:
    if size < 1 << 10:
        return f"{size} bytes"
    if size < 1 << 20:
        return f"{size / (1 << 10):.1f} KiB"
    return f"{size / (1 << 20):.1f} MiB"
