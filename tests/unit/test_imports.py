"""Imports point down: no import cycle in components/ or lab/, between modules or between layers,
and the code that runs on hosts (every module under an `onhost/` folder) imports nothing from
the program, nor the program from it.

Read from the source (ast), so every import that can run counts: at module level and inside a
function. A cycle that works today only because one side imports late is still a cycle: the
next module-level import or a moved function turns it into an ImportError. An import under
`if TYPE_CHECKING:` never runs and is left out (a layer's config check is typed with the
FleetConfig that components/config/fleet.py assembles from the layers' configs).
"""

from __future__ import annotations

import ast
import functools
import pickle
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("components", "lab")
PROGRAM = ("components", "lab", "policies", "tests")


def _modules(root: Path = ROOT) -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package), for every importable .py file of PACKAGES."""
    out = {}
    for pkg in PACKAGES:
        for p in sorted((root / pkg).rglob("*.py")):
            parts = list(p.relative_to(root).with_suffix("").parts)
            if not all(s.isidentifier() for s in parts):
                continue  # not a module name: never imported
            is_pkg = parts[-1] == "__init__"
            out[".".join(parts[:-1] if is_pkg else parts)] = (p, is_pkg)
    return out


def _type_checking(node: ast.AST) -> bool:
    t = node.test if isinstance(node, ast.If) else None
    return (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING") or (
        isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")


def _runnable(node: ast.AST):
    """Every node below `node`, except the body of an `if TYPE_CHECKING:` (its else still runs)."""
    for child in ast.iter_child_nodes(node):
        yield child
        if _type_checking(child):
            for branch in child.orelse:
                yield branch
                yield from _runnable(branch)
        else:
            yield from _runnable(child)


def _imported(tree: ast.AST, name: str, is_pkg: bool) -> list[tuple[str, int, int]]:
    """(absolute module name, level, line) of every import in a module, wherever it sits;
    `from X import y` names X.y (a submodule or not: the caller resolves it)."""
    package = name if is_pkg else name.rpartition(".")[0]
    out = []
    for node in _runnable(tree):
        if isinstance(node, ast.Import):
            out += [(a.name, 0, node.lineno) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*up, *([node.module] if node.module else [])])
            out += [(f"{base}.{a.name}", node.level, node.lineno) for a in node.names]
    return out


def _resolve(name: str, mods: dict) -> str | None:
    """The longest prefix of `name` that is one of our modules."""
    parts = name.split(".")
    while parts and ".".join(parts) not in mods:
        parts.pop()
    return ".".join(parts) or None


def import_graph(root: Path = ROOT) -> dict[str, dict[str, int]]:
    """module -> {module it imports: line}. Importing a.b.c also runs a/__init__ and a/b/__init__,
    so those count too, except a module's own parents (always imported before it)."""
    mods = _modules(root)
    graph: dict[str, dict[str, int]] = {}
    for name, (path, is_pkg) in mods.items():
        edges = graph.setdefault(name, {})
        for target, _, line in _imported(ast.parse(path.read_text(), str(path)), name, is_pkg):
            hit = _resolve(target, mods)
            while hit:
                if hit != name and not name.startswith(hit + "."):
                    edges.setdefault(hit, line)
                hit = hit.rpartition(".")[0] if "." in hit else None
                hit = hit if hit in mods else None
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Every strongly connected component of more than one node (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 10_000))
    try:
        for v in sorted(graph):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(old)
    return sorted(found)


@functools.lru_cache(maxsize=None)
def _graph() -> dict[str, dict[str, int]]:
    """This repository's graph, read once for every test here."""
    return import_graph(ROOT)


def layer_of(module: str) -> str:
    """`components.layers.<layer>` for a layer's module, else the module itself."""
    parts = module.split(".")
    return ".".join(parts[:3]) if parts[:2] == ["components", "layers"] and len(parts) > 2 else module


def layer_graph(graph: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """Layer -> {layer it imports: line}, one node per `components.layers.<layer>` package."""
    out: dict[str, dict[str, int]] = {}
    for v, edges in graph.items():
        for w, line in edges.items():
            if layer_of(v) != layer_of(w) and layer_of(v) != v and layer_of(w) != w:
                out.setdefault(layer_of(v), {}).setdefault(layer_of(w), line)
    return out


def _explain(graph: dict[str, dict[str, int]], comp: list[str]) -> str:
    inside = set(comp)
    return "\n".join(f"  {v} (line {line}) imports {w}" for v in comp
                     for w, line in sorted(graph.get(v, {}).items()) if w in inside)


def _onhost(module: str) -> bool:
    return "onhost" in module.split(".")


# ---- no cycle ------------------------------------------------------------------------------

def test_no_import_cycle_between_modules():
    g = _graph()
    found = cycles(g)
    assert not found, "import cycles (move what both sides need below them):\n" + "\n".join(
        _explain(g, c) for c in found)


def test_no_import_cycle_between_layers():
    """A layer builds on the layers below it, never on one that builds on it."""
    g = _graph()
    lg = layer_graph(g)
    found = cycles(lg)
    assert not found, "layers that import each other:\n" + "\n".join(
        f"  {v} imports {w} ({next(m for m in g if layer_of(m) == v and any(layer_of(x) == w for x in g[m]))})"
        for c in found for v in c for w in lg.get(v, {}) if w in c)


def test_the_check_sees_a_cycle(tmp_path):
    """A function-local import back is a cycle too (the shape transport/ssh.py and batch.py had);
    a type-only one is not."""
    pkg = tmp_path / "components" / "transport"
    pkg.mkdir(parents=True)
    (tmp_path / "lab").mkdir()
    (tmp_path / "components" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("from .ssh import Connection\n")
    (pkg / "ssh.py").write_text("from .batch import Batcher\nclass Connection: ...\n")
    (pkg / "batch.py").write_text("def run():\n    from .ssh import Connection\n")
    assert cycles(import_graph(tmp_path)) == [["components.transport.batch", "components.transport.ssh"]]
    (pkg / "batch.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                  "    from .ssh import Connection\nclass Batcher: ...\n")
    assert cycles(import_graph(tmp_path)) == []


# ---- code that runs on hosts ------------------------------------------------------------------

def test_host_side_modules_import_only_what_a_host_has():
    """A module under `onhost/` runs on a host with Python's standard library and what that host
    has installed (pynvml, huggingface_hub): not the program, which is not there."""
    mods = _modules()
    host_side = [m for m in mods if _onhost(m) and not mods[m][1]]
    assert len(host_side) >= 6, host_side  # guard, probe, download, verify, the lab's two
    bad = []
    for m in host_side:
        path, is_pkg = mods[m]
        for target, level, line in _imported(ast.parse(path.read_text()), m, is_pkg):
            if level or target.split(".")[0] in PROGRAM:
                bad.append(f"{path.relative_to(ROOT)}:{line} imports {target}")
    assert not bad, "host-side code importing the program:\n  " + "\n  ".join(bad)


def test_the_program_reads_host_side_code_never_imports_it():
    """The program ships a host-side module's text or bytes; importing it would run host code
    in the program (and let program imports creep into it)."""
    g = _graph()
    bad = [f"{v} (line {line}) imports {w}" for v, edges in g.items() if not _onhost(v)
           for w, line in edges.items() if _onhost(w) and not w.endswith(".onhost")]
    assert not bad, "\n".join(bad)


def test_what_the_program_ships_is_host_side():
    from components.layers.gpu_runtime.probe_source import PROBE_SCRIPT
    from components.layers.guards.component import SOURCE
    from components.layers.model_snapshot.component import ONHOST
    from lab.k3s import ONHOST as LAB_ONHOST

    shipped = [PROBE_SCRIPT, SOURCE, ONHOST / "download.py", ONHOST / "verify.py",
               LAB_ONHOST / "k3s_shim.py", LAB_ONHOST / "k3s_status.py"]
    for path in shipped:
        assert path.is_file() and path.parent.name == "onhost", path


# ---- a moved provider ----------------------------------------------------------------------------

@pytest.mark.parametrize("recorded", ["components.layers.acceptance.job"])
def test_a_moved_provider_loads_from_where_stacks_recorded_it(recorded):
    """The engine keeps a dynamic provider pickled by reference (module and class name) and
    unpickles that recorded copy on refresh and destroy: the canary job's provider moved to
    components/layers/slurm/canary.py, and stacks deployed before still name its old module."""
    from components.layers.slurm.canary import CanaryJobProvider

    # what the SDK's dill wrote: the class by module and name (GLOBAL), instantiated (NEWOBJ)
    old = b"c" + recorded.encode() + b"\nCanaryJobProvider\n)\x81."
    assert type(pickle.loads(old)) is CanaryJobProvider
