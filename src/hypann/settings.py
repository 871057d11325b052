"""The settings of :class:`hypann.HyperbolicIndex`, declared once.

Each :class:`Setting` names a constructor argument of the index with its
default, what values it takes, whether an index file keeps it and the
``hypann build`` option that sets it. ``tests/test_settings_table.py`` checks
that the constructor, :meth:`~hypann.HyperbolicIndex.get_params`, the
docstring's parameter list, the file header and the command line agree with
this table, so a new index setting is added here first.

The algorithms' own build and query settings (``ratio``, ``width``, ``ef``,
...) are declared by their classes (``build_settings`` and
``query_settings`` of a :class:`~hypann.search.base.SearchAlgorithm`, as
:class:`hypann._params.Param` tuples), the oracles' by theirs;
:func:`parameters_markdown` turns all of them into ``docs/parameters.md``.

Default ``k``. A search without ``k`` returns the nearest neighbour
(:data:`DEFAULT_K` = 1): :meth:`hypann.HyperbolicIndex.search`,
:meth:`hypann.distributed.ShardedIndex.search` and ``hypann search``. Data
sets and the demo evaluate at depth :data:`DEFAULT_EVAL_K` = 10. The
scikit-learn estimators keep scikit-learn's ``n_neighbors=5``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Setting:
    """One setting of the index.

    Attributes
    ----------
    name : str
        The constructor keyword and the key in ``get_params()``.
    default : object
        The constructor's default.
    allowed : str
        The values it takes, in words (as error messages say them).
    saved : bool
        Whether an index file keeps it (a header field); the others are
        settings of the running process.
    cli : str or None
        The ``hypann build`` option that sets it, None when there is none.
    header : str or None
        Name of the file header field that keeps a saved setting, when it is
        not ``name``.
    """

    name: str
    default: object
    allowed: str
    saved: bool
    cli: str | None
    header: str | None = None


INDEX_SETTINGS = (
    Setting("algorithm", "auto", "an algorithm name (hypann.search.registry.available_algorithms())", True,
            "--algorithm"),
    Setting("oracle", None, "None, an oracle spec string or an EuclideanOracle", True, "--oracle"),
    Setting("model", "poincare", "'poincare' or 'lorentz'", True, "--model"),
    Setting("c", 1.0, "a finite number > 0 (the curvature is -c)", True, "--c"),
    Setting("random_state", None, "None or an integer >= 0", True, "--seed"),
    Setting("n_jobs", None, "None, -1 or an integer >= 1 (threads)", False, "--threads"),
    Setting("verbose", True, "True or False (progress bars)", False, None),
    Setting("storage", "float64", "'float64' or 'float32' (dtype of the stored coordinates)", True, "--storage",
            header="dtype"),
)

#: name -> :class:`Setting`
BY_NAME = {s.name: s for s in INDEX_SETTINGS}

#: ``k`` of a search when the caller gives none: :meth:`hypann.HyperbolicIndex.search`,
#: :meth:`hypann.distributed.ShardedIndex.search` and ``hypann search`` (the nearest
#: neighbour, as ``KDTree.query`` and hnswlib's ``knn_query`` default to).
DEFAULT_K = 1

#: Depth of an evaluation: neighbours per query of a data set's ground truth
#: (:func:`hypann.datasets.load`, :func:`hypann.datasets.base.build_dataset`)
#: and the ``k`` of ``hypann demo``. The scikit-learn estimators keep
#: scikit-learn's own ``n_neighbors=5``.
DEFAULT_EVAL_K = 10


# --------------------------------------------------------------------------- docs/parameters.md

_DOC_HEADER = """# Parameters

Generated from the declarations in the code (`hypann.settings.INDEX_SETTINGS`, and
`build_settings` / `query_settings` of every algorithm and oracle) by
`hypann.settings.parameters_markdown()`; `tests/test_settings_table.py` fails when this file
is out of date. Regenerate with

    PYTHONPATH=src python -c "from hypann.settings import write_parameters_doc; write_parameters_doc('docs/parameters.md')"

Build settings go to the constructor (`HyperbolicIndex(algorithm=..., **settings)`,
`hypann build --param key=value`, an oracle spec `"name:key=value,..."`); query settings to
each call (`index.search(Q, k, **settings)`, `hypann search --param key=value`,
`oracle_params={...}` for the oracle). A search without `k` returns the nearest neighbour
(`DEFAULT_K` = 1); data sets and the demo evaluate at depth `DEFAULT_EVAL_K` = 10; the
scikit-learn estimators keep scikit-learn's `n_neighbors=5`. One name per concept: `ef` is the
search list size of every graph search (Vamana, the k-NN graph, hnswlib, faiss HNSW).
"""


def _cell(value) -> str:
    return str(value).replace("|", "\\|")


def _param_table(params) -> list[str]:
    rows = ["| name | default | allowed | meaning |", "|---|---|---|---|"]
    for p in params:
        doc = p.doc + (f" (deprecated alias: {', '.join(f'`{a}`' for a in p.aliases)})" if p.aliases else "")
        rows.append(f"| `{p.name}` | `{p.default!r}` | {_cell(p.allowed())} | {_cell(doc)} |")
    return rows


def _section(title, cls) -> list[str]:
    out = [f"### {title}", ""]
    for label, params in (("Build settings", cls.build_settings), ("Query settings", cls.query_settings)):
        out.append(f"{label}:" + ("" if params else " none."))
        out.append("")
        if params:
            out += _param_table(params) + [""]
    return out


def parameters_markdown() -> str:
    """The text of ``docs/parameters.md``: every declared setting of the index, the algorithms and the oracles."""
    from hypann.oracles import registry as oracle_registry
    from hypann.search import hyperbolic_kdtree  # noqa: F401 - registers the "hkdtree" oracle
    from hypann.search.registry import algorithm_class, available_algorithms

    out = [_DOC_HEADER, "## Index", "", "`HyperbolicIndex(...)` keywords (`hypann.settings.INDEX_SETTINGS`).", "",
           "| name | default | allowed | saved in the file | `hypann build` |", "|---|---|---|---|---|"]
    for s in INDEX_SETTINGS:
        out.append(f"| `{s.name}` | `{s.default!r}` | {_cell(s.allowed)} | {'yes' if s.saved else 'no'} | "
                   f"{f'`{s.cli}`' if s.cli else '-'} |")
    out += ["", "## Algorithms", ""]
    for name in available_algorithms():
        cls = algorithm_class(name)
        out += _section(f"`{name}` ({cls.__name__})", cls)
    out += ["## Oracles", ""]
    for name in sorted(oracle_registry._BUILTIN):
        cls = oracle_registry._resolve(name)
        out += _section(f"`{name}` ({cls.__name__})", cls)
    return "\n".join(out).rstrip() + "\n"


def write_parameters_doc(path) -> None:
    """Write :func:`parameters_markdown` to ``path`` (``docs/parameters.md``)."""
    from hypann._files import atomic_write

    text = parameters_markdown()
    atomic_write(path, lambda fh: fh.write(text), text=True)
