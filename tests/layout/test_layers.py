"""The package layout holds: data flows one way, and the pure modules stay pure.

`runnerd/__init__.py` lists the layers; this reads every module's imports
(module level, inside functions and under `TYPE_CHECKING` alike: a type-only
import is still a dependency a reader must follow) and checks each against it.
"""

from __future__ import annotations

import ast
import functools
import importlib
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "runnerd"

# Lowest first. A module may import its own package and any package of a
# lower rank; two packages of the same rank never import each other.
RANKS: dict[str, int] = {
    "runnerd": 0,  # __init__: the version
    "errors": 0,
    "metrics": 0,
    "atomic_file": 0,
    "contract": 1,
    "backend": 2,
    "config": 3,
    "workload": 4,
    "watch": 4,
    "session": 5,
    "local": 5,
    "kube": 5,
    "backends": 6,
    "http": 7,
    "daemon": 8,
    "cli": 9,
    "__main__": 10,
}
# The client verbs talk HTTP to a daemon: they import no server package.
CLIENT = "client"

PURE = (
    "runnerd.contract",
    "runnerd.contract.json_checks",
    "runnerd.contract.requests",
    "runnerd.errors",
    "runnerd.backend",
    "runnerd.backend.spec",
    "runnerd.config",
    "runnerd.config.render",
    "runnerd.config.images",
    "runnerd.watch",
    "runnerd.watch.paths",
    "runnerd.watch.changes",
    "runnerd.watch.budget",
    "runnerd.watch.debounce",
    "runnerd.watch.runs",
    "runnerd.watch.apps",
    "runnerd.watch.kernel",
    "runnerd.session.registry",
    "runnerd.session.ending",
    "runnerd.session.rings",
    "runnerd.session.admission",
    "runnerd.session.watchspec",
    "runnerd.session.paths",
    "runnerd.session.capabilities",
    "runnerd.http.openapi",
    "runnerd.http.openapi_watch",
    "runnerd.http.wsframes",
    "runnerd.kube.settings",
    "runnerd.kube.errors",
    "runnerd.kube.podstatus",
    "runnerd.kube.podspec",
    "runnerd.kube.bundle",
    "runnerd.kube.kubeconfig",
    "runnerd.kube.ledger",
    "runnerd.kube.podphase",
    "runnerd.kube.policy",
    "runnerd.kube.splice",
    "runnerd.kube.watchpod",
    "runnerd.kube.workspaceapp",
    "runnerd.kube.watchstatus",
    "runnerd.kube.routehealth",
)
IO_LIBRARIES = ("trio", "httpx", "quart", "quart_trio", "hypercorn")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every runnerd module `path` imports, anywhere in the file."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
    return {name for name in found if name == "runnerd" or name.startswith("runnerd.")}


def _graph() -> dict[str, set[str]]:
    return {_module_name(p): _imports(p) for p in sorted(ROOT.rglob("*.py"))}


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "runnerd"


def test_layers_every_import_points_down() -> None:
    graph = _graph()
    wrong = []
    for module, imports in graph.items():
        here = _package(module)
        for target in imports:
            there = _package(target)
            if here == CLIENT or there == CLIENT:
                ok = here == there or (here in ("cli", "__main__") and there == CLIENT)
            else:
                ok = here == there or RANKS[there] < RANKS[here]
            if not ok:
                wrong.append(f"{module} -> {target}")
    assert wrong == []


def test_layers_every_package_is_ranked() -> None:
    packages = {_package(module) for module in _graph()}
    assert packages - set(RANKS) - {CLIENT} == set()


def test_layers_no_import_cycles() -> None:
    graph = _graph()
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> list[str] | None:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return None
        for target in sorted(graph.get(module, ())):
            cycle = visit(target, [*path, module])
            if cycle:
                return cycle
        done.add(module)
        return None

    for module in sorted(graph):
        assert visit(module, []) is None


# Besides `__init__` and `__main__`: what does not fit a package belongs in one.
MAX_TOP_LEVEL_MODULES = 6


def test_layers_few_top_level_modules() -> None:
    modules = {p.stem for p in ROOT.glob("*.py")} - {"__init__", "__main__"}
    assert len(modules) <= MAX_TOP_LEVEL_MODULES, sorted(modules)


def test_layers_every_package_has_its_docstring() -> None:
    for init in ROOT.rglob("__init__.py"):
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc, f"{init} has no docstring"
        if init.parent != ROOT:
            assert "import" in doc, f"{init} does not say what it may import"


@pytest.mark.parametrize("module", PURE)
def test_layers_pure_modules_import_no_io_library(module: str) -> None:
    code = (
        f"import sys, {module}\nprint(','.join(m for m in {IO_LIBRARIES!r} if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=30
    )
    assert out.stdout.strip() == ""


# --- what docstrings and comments cite, so a reference can always be followed

REPO = ROOT.parent
PROSE_DIRS = ("runnerd", "tests", "bench")
# A dotted name under runnerd as prose writes it: not inside a path or a URL.
DOTTED = re.compile(r"(?<![\w./-])runnerd(?:\.[A-Za-z_]\w*)+")
# A Markdown document a docstring or comment cites, as a path from the repository root.
CITED_MD = re.compile(r"(?<![\w/.-])[\w./-]*\.md\b")


# Cached: two tests read the same prose of ~330 files, and a name that is
# no module costs a search of the whole sys.path each time it is tried.
@functools.cache
def _prose(path: Path) -> tuple[str, ...]:
    """Every docstring (module, class, function) and comment of `path`."""
    source = path.read_text()
    texts = [
        token.string
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                texts.append(doc)
    return tuple(texts)


@functools.cache
def _shipped_file_names() -> frozenset[str]:
    """Names like `runnerd.socket` are files (the systemd units), not modules."""
    return frozenset(p.name for d in ("systemd", "config") for p in (REPO / d).iterdir())


@functools.cache
def _resolves(name: str) -> bool:
    """`name` is a module, or an attribute of one (a class's members and
    annotated fields included)."""
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for part in parts[cut:]:
            if hasattr(obj, part):
                obj = getattr(obj, part)
            elif isinstance(obj, type) and part in getattr(obj, "__annotations__", {}):
                obj = None
            else:
                return False
        return True
    return False


def _unresolved_names(text: str) -> list[str]:
    files = _shipped_file_names()
    names = (match.group(0) for match in DOTTED.finditer(text))
    return [name for name in names if name not in files and not _resolves(name)]


def _prose_files() -> list[Path]:
    return [p for d in PROSE_DIRS for p in sorted((REPO / d).rglob("*.py"))]


def test_layers_every_runnerd_name_in_prose_exists() -> None:
    wrong = [
        f"{path.relative_to(REPO)}: {name}"
        for path in _prose_files()
        for text in _prose(path)
        for name in _unresolved_names(text)
    ]
    assert wrong == []


def test_layers_a_renamed_module_in_prose_is_caught() -> None:
    text = "The IO side is `runnerd.sessions`; the rings, runnerd.session.rings.EventRing."
    assert _unresolved_names(text) == ["runnerd.sessions"]
    assert _unresolved_names("see runnerd.socket and runnerd.toml's keys") == []
    assert _unresolved_names("runnerd.session.session.Session.no_such_member") != []


def _missing_documents(text: str) -> list[str]:
    return [cited for cited in CITED_MD.findall(text) if not (REPO / cited).is_file()]


def test_layers_every_cited_document_is_in_the_repository() -> None:
    missing = [
        f"{path.relative_to(REPO)}: {cited}"
        for path in _prose_files()
        for text in _prose(path)
        for cited in _missing_documents(text)
    ]
    assert missing == []


def test_layers_a_document_outside_the_repository_is_caught() -> None:
    text = "See docs/kubernetes.md §2, README.md and bench/README.md."
    assert _missing_documents(text) == ["docs/kubernetes.md"]
