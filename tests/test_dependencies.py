"""hypann's imports match pyproject.toml: every third-party package it imports is declared, and only
the declared core dependencies are needed to import hypann (the extras stay optional)."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata as md
import json
import os
import pkgutil
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import hypann

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"


def _normalize(name):
    """PEP 503 name: lower case, runs of ``-_.`` as one ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(req):
    return _normalize(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req).group(1))


def declared():
    """``(core, extras)``: normalized distribution names of ``dependencies`` and of each optional extra."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {_requirement_name(r) for r in project["dependencies"]}
    extras = {}
    for extra, reqs in project.get("optional-dependencies", {}).items():
        # "hypann[a,b]" (e.g. in `all`) refers to other extras, not to a package
        extras[extra] = {_requirement_name(r) for r in reqs if _requirement_name(r) != "hypann"}
    return core, extras


def hypann_modules():
    names = ["hypann"]
    names += [m.name for m in pkgutil.walk_packages(hypann.__path__, prefix="hypann.")]
    return sorted(names)


def _top_level_imports(tree):
    """``{top-level package name}`` of every absolute import anywhere in the module (lazy ones too)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def third_party_imports():
    """``{import name: [modules importing it]}`` over every module of hypann, from their source."""
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    out = {}
    for name in hypann_modules():
        spec = importlib.util.find_spec(name)
        tree = ast.parse(Path(spec.origin).read_text(), filename=spec.origin)
        for top in _top_level_imports(tree) - stdlib - {"hypann"}:
            out.setdefault(top, []).append(name)
    return out


def distribution_of(import_name):
    """Normalized distribution names providing ``import_name`` (the name itself when not installed)."""
    dists = md.packages_distributions().get(import_name)
    return {_normalize(d) for d in dists} if dists else {_normalize(import_name)}


def test_pyproject_declares_the_extras_hypann_documents():
    core, extras = declared()
    assert {"numpy", "scipy", "numba", "tqdm"} <= core
    assert extras["sklearn"] == {"scikit-learn"}
    assert "gensim" in extras["bench"] and not any("gensim" in e for n, e in extras.items() if n != "bench")
    all_extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["all"]
    assert "sklearn" in all_extras[0] and "torch" not in all_extras[0] and "bench" not in all_extras[0]


def test_every_module_imports_and_every_third_party_import_is_declared():
    core, extras = declared()
    allowed = core.union(*extras.values())
    for name in hypann_modules():
        if name == "hypann.sklearn" and importlib.util.find_spec("sklearn") is None:
            continue  # the one module that needs its extra at import time (checked below)
        importlib.import_module(name)
    undeclared = {
        top: modules for top, modules in third_party_imports().items() if not distribution_of(top) & allowed
    }
    assert not undeclared, f"imported but not declared in pyproject.toml (core or an extra): {undeclared}"
    # and each extra is used: nothing declared for hypann's own code that it does not import
    used = set().union(*(distribution_of(top) for top in third_party_imports()))
    for extra in ("faiss", "hnswlib", "sklearn", "datasets", "plot"):
        assert extras[extra] <= used, f"extra {extra!r} declares {extras[extra] - used}, which hypann never imports"


def _core_closure(core):
    """Core distributions and what they require (without extras), as import names."""
    seen, todo = set(), list(core)
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = md.distribution(name).requires or []
        except md.PackageNotFoundError:
            continue
        todo += [_requirement_name(r) for r in requires if "extra ==" not in r]
    imports = {top for top, dists in md.packages_distributions().items() if {_normalize(d) for d in dists} & seen}
    return sorted(imports)


def test_hypann_imports_with_only_its_core_dependencies():
    """Block every package outside the core closure, then import each module of hypann."""
    core, _ = declared()
    allowed = _core_closure(core)
    script = textwrap.dedent(
        f"""
        import importlib, json, pkgutil, sys
        ALLOWED = set({allowed!r}) | set(sys.stdlib_module_names) | {{"hypann", "__future__"}}

        class Block:
            def find_spec(self, name, path=None, target=None):
                top = name.split(".")[0]
                if top not in ALLOWED and not top.startswith("_"):
                    raise ModuleNotFoundError(f"blocked {{top}}: not a core dependency", name=top)
                return None

        sys.meta_path.insert(0, Block())
        import hypann
        names = [m.name for m in pkgutil.walk_packages(hypann.__path__, prefix="hypann.")]
        failed = {{}}
        for name in names:
            try:
                importlib.import_module(name)
            except ImportError as exc:
                failed[name] = str(exc)
        print(json.dumps(failed))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
        env={**os.environ, "PYTHONPATH": str(SRC)},
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    failed = json.loads(proc.stdout.strip().splitlines()[-1])
    # only the scikit-learn wrappers need their extra to be imported, and they say which
    assert set(failed) == {"hypann.sklearn"}, failed
    assert 'pip install "hypann[sklearn]"' in failed["hypann.sklearn"]
