"""The settings of :class:`hypann.HyperbolicIndex`, declared once.

Each :class:`Setting` names a constructor argument of the index with its
default, what values it takes, whether an index file keeps it and the
``hypann build`` option that sets it. ``tests/test_settings_table.py`` checks
that the constructor, :meth:`~hypann.HyperbolicIndex.get_params`, the
docstring's parameter list, the file header and the command line agree with
this table, so a new index setting is added here first.

The algorithms' own build and query settings (``ratio``, ``width``, ``ef``,
...) are declared by their classes (``__init__`` and ``query_params`` of a
:class:`~hypann.search.base.SearchAlgorithm`), the oracles' by theirs.
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
