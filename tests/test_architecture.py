"""The package's import graph: layers that import only downward, and no cycles.

Every module of ``src/hypann`` is read with :mod:`ast` (nothing is imported)
and every ``import`` statement in it counts, also those inside functions and
``if TYPE_CHECKING`` blocks. Each module belongs to one layer of
:data:`LAYERS`; a module may import modules of its own layer or of a lower
one. The module graph must have no cycle, and ``importlib.import_module`` (or
``__import__``) may load only a third-party library named by a string literal,
except in the places listed in :data:`DYNAMIC_IMPORTS`. See
``docs/architecture.md``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import hypann

PACKAGE_DIR = Path(hypann.__file__).resolve().parent

# Lowest first. A module belongs to the layer of the longest prefix that names it
# (the module itself or a package containing it).
LAYERS = (
    ("base", ("hypann._version", "hypann._borrowed", "hypann._files", "hypann._prefetch", "hypann._progress",
              "hypann._runtime", "hypann.metrics", "hypann.result")),
    ("geometry", ("hypann.geometry", "hypann._validation", "hypann._params")),
    ("oracles", ("hypann.oracles",)),
    ("search", ("hypann.search", "hypann.graph")),
    ("index", ("hypann.index", "hypann.io", "hypann.updates", "hypann.settings", "hypann.rounding")),
    ("library", ("hypann.sklearn", "hypann.datasets", "hypann.eval", "hypann.distributed", "hypann.embed")),
    ("facade", ("hypann",)),  # the package's __init__: lazy public names over every layer below
    ("apps", ("hypann.apps",)),
)

# Modules allowed to import by a computed name, and why.
DYNAMIC_IMPORTS = {
    "hypann": "lazy public names (PEP 562): the tables _EXPORTS and _SUBPACKAGES, checked as edges below",
    "hypann.oracles.registry": "the class of a user's oracle, recorded in an index file or given as 'module:Class'",
}


# --------------------------------------------------------------------------- the checker


def module_name(path: Path, root: Path, package: str) -> tuple[str, bool]:
    """Dotted name of the module at ``path`` and whether it is a package ``__init__``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts = parts[:-1]
    return ".".join([package, *parts]), is_package


def read_package(root: Path, package: str) -> dict[str, tuple[str, bool]]:
    """``{module: (source, is_package)}`` of every ``.py`` file under ``root``."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        name, is_package = module_name(path, root, package)
        out[name] = (path.read_text(encoding="utf-8"), is_package)
    return out


def _is_dynamic_import(call: ast.Call) -> bool:
    f = call.func
    return (isinstance(f, ast.Attribute) and f.attr == "import_module") or (
        isinstance(f, ast.Name) and f.id in ("import_module", "__import__"))


def imports_of(name: str, source: str, is_package: bool, modules) -> tuple[set, list]:
    """Modules of the package that ``name`` imports, and its dynamic imports ``(line, text)``.

    ``from a import b`` names module ``a.b`` when that is a module of the
    package, else ``a``. Relative imports are resolved against ``name``.
    Dynamic imports with a string literal naming a module outside the package
    (an optional third-party library) are not reported.
    """
    package = name.split(".")[0]
    tree = ast.parse(source, filename=name)
    found, dynamic = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            targets = [f"{module}.{a.name}" if f"{module}.{a.name}" in modules else module for a in node.names]
        elif isinstance(node, ast.Call) and _is_dynamic_import(node):
            arg = node.args[0] if node.args else None
            literal = isinstance(arg, ast.Constant) and isinstance(arg.value, str)
            if not (literal and arg.value.split(".")[0] != package):
                dynamic.append((node.lineno, ast.unparse(node)))
            continue
        else:
            continue
        found.update(t for t in targets if t == package or t.startswith(package + "."))
    found.discard(name)
    return found, dynamic


def layer_of(module: str, layers=LAYERS) -> int | None:
    """Index in ``layers`` of the longest prefix naming ``module``; None when no layer names it."""
    best, best_len = None, -1
    for i, (_, prefixes) in enumerate(layers):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = i, len(prefix)
    return best


def find_cycles(graph: dict[str, set]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, on_stack, stack, out = {}, {}, set(), [], []
    counter = [0]

    def visit(v):  # recursion depth <= number of modules (about 70)
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def check_package(sources: dict[str, tuple[str, bool]], *, layers=LAYERS, dynamic_ok=DYNAMIC_IMPORTS,
                  extra_edges=None) -> list[str]:
    """Every violation of the layering in ``sources`` (see :func:`read_package`), as messages."""
    problems, graph = [], {}
    for name, (source, is_package) in sources.items():
        deps, dynamic = imports_of(name, source, is_package, sources)
        graph[name] = deps | set((extra_edges or {}).get(name, ()))
        if dynamic and name not in dynamic_ok:
            problems.extend(f"{name}:{line}: import by computed name {text} (import the module explicitly)"
                            for line, text in dynamic)
    for name in sorted(graph):
        mine = layer_of(name, layers)
        if mine is None:
            problems.append(f"{name}: in no layer (add it to LAYERS)")
            continue
        for dep in sorted(graph[name]):
            theirs = layer_of(dep, layers)
            if theirs is not None and theirs > mine:
                problems.append(f"{name} ({layers[mine][0]}) imports {dep} ({layers[theirs][0]}), a higher layer")
    problems.extend("import cycle: " + " <-> ".join(c) for c in find_cycles(graph))
    return problems


def facade_edges(sources) -> dict[str, set]:
    """The modules the package ``__init__`` loads lazily, read from its tables ``_EXPORTS`` / ``_SUBPACKAGES``."""
    tree = ast.parse(sources["hypann"][0])
    edges = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            value = ast.literal_eval(node.value) if node.targets[0].id in ("_EXPORTS", "_SUBPACKAGES") else None
            if node.targets[0].id == "_EXPORTS":
                edges.update(value.values())
            elif node.targets[0].id == "_SUBPACKAGES":
                edges.update(f"hypann.{s}" for s in value)
    return {"hypann": edges}


# --------------------------------------------------------------------------- the package


@pytest.fixture(scope="module")
def sources():
    return read_package(PACKAGE_DIR, "hypann")


def test_package_imports_only_downward_without_cycles(sources):
    problems = check_package(sources, extra_edges=facade_edges(sources))
    assert not problems, "\n".join(problems)


def test_every_lazily_exported_module_exists(sources):
    for target in facade_edges(sources)["hypann"]:
        assert target in sources, f"hypann._EXPORTS / _SUBPACKAGES name {target}, which is not a module"


def test_the_walk_sees_the_whole_package(sources):
    # a sanity check of the reading itself: known modules and known edges are there
    assert {"hypann.index", "hypann.io", "hypann.apps.cli", "hypann.geometry._kernels"} <= set(sources)
    deps, _ = imports_of("hypann.index", *sources["hypann.index"], sources)
    assert "hypann.io" in deps  # a function-local import
    assert "hypann.search.registry" in deps


def test_algorithm_registry_table_and_loader_agree():
    from hypann.search import registry

    source = Path(registry.__file__).read_text()
    loaded = set(re.findall(r'name == "(\w+)"', source))
    assert loaded == set(registry._ALGORITHMS)
    for name, module in registry._ALGORITHMS.items():
        assert registry.algorithm_class(name).__module__ == module


def test_builtin_oracles_resolve_without_a_lookup_by_string():
    from hypann.oracles import registry

    for name, path in registry._BUILTIN.items():
        if name in ("faiss", "hnswlib"):
            continue  # optional libraries; the class is imported all the same, the library only when built
        cls = registry._resolve(name)
        assert f"{cls.__module__}:{cls.__qualname__}" == path


# --------------------------------------------------------------------------- the checker can fail


def _fake(**modules):
    """A fake package ``pkg`` from ``{dotted_suffix: source}``; ``init`` is ``pkg/__init__``."""
    out = {}
    for key, source in modules.items():
        name = "pkg" if key == "init" else "pkg." + key.replace("__", ".")
        out[name] = (source, key == "init" or key.endswith("__init"))
    return out


FAKE_LAYERS = (("low", ("pkg.low",)), ("mid", ("pkg.mid",)), ("high", ("pkg.high", "pkg")))


def test_checker_accepts_downward_imports():
    src = _fake(init="", low="import numpy", mid="from pkg import low", high="from pkg.mid import x")
    assert check_package(src, layers=FAKE_LAYERS, dynamic_ok={}) == []


def test_checker_reports_an_upward_import_inside_a_function():
    src = _fake(init="", low="def f():\n    from pkg.high import thing\n", mid="", high="")
    assert check_package(src, layers=FAKE_LAYERS, dynamic_ok={}) == [
        "pkg.low (low) imports pkg.high (high), a higher layer"]


def test_checker_reports_a_relative_upward_import():
    src = _fake(init="", low="from . import mid\n", mid="", high="")
    assert check_package(src, layers=FAKE_LAYERS, dynamic_ok={}) == [
        "pkg.low (low) imports pkg.mid (mid), a higher layer"]


def test_checker_reports_a_cycle_within_a_layer():
    src = _fake(init="", low="", mid__a="import pkg.mid.b", mid__b="from pkg.mid import a", mid__init="", high="")
    problems = check_package(src, layers=FAKE_LAYERS, dynamic_ok={})
    assert problems == ["import cycle: pkg.mid.a <-> pkg.mid.b"]


def test_checker_reports_imports_by_computed_name():
    src = _fake(init="", low="import importlib\nimportlib.import_module('pkg.' + 'high')\n",
                mid="import importlib\nimportlib.import_module('scipy.spatial')\n", high="")
    problems = check_package(src, layers=FAKE_LAYERS, dynamic_ok={})
    assert len(problems) == 1
    assert re.fullmatch(r"pkg\.low:2: import by computed name importlib\.import_module\('pkg\.' \+ 'high'\) .*",
                        problems[0])


def test_checker_reports_a_module_in_no_layer():
    src = _fake(init="", low="", mid="", high="", stray="")
    layers = (("low", ("pkg.low",)), ("mid", ("pkg.mid",)), ("high", ("pkg.high",)))
    assert "pkg.stray: in no layer (add it to LAYERS)" in check_package(src, layers=layers, dynamic_ok={})
