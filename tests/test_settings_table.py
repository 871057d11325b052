"""The index settings declared in :mod:`hypann.settings` agree with every place that repeats them."""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path

import numpy as np
import pytest

from hypann import sklearn as hsk
from hypann.apps.cli import build_parser
from hypann.index import DEFAULT_ALGORITHM, HyperbolicIndex
from hypann.io import read_metadata
from hypann.settings import BY_NAME, INDEX_SETTINGS

NAMES = [s.name for s in INDEX_SETTINGS]


def test_constructor_takes_the_declared_settings_with_their_defaults():
    sig = inspect.signature(HyperbolicIndex.__init__).parameters
    keywords = {name: p.default for name, p in sig.items() if p.kind == p.KEYWORD_ONLY}
    assert list(keywords) == NAMES
    assert keywords == {s.name: s.default for s in INDEX_SETTINGS}
    assert BY_NAME["algorithm"].default == DEFAULT_ALGORITHM


def test_get_params_lists_the_declared_settings_then_the_algorithm_settings():
    params = HyperbolicIndex(algorithm="shells", width=3.0).get_params()
    assert list(params) == [*NAMES, "width"]
    assert {k: params[k] for k in NAMES} == {s.name: s.default for s in INDEX_SETTINGS} | {"algorithm": "shells"}


def test_docstring_documents_every_setting():
    doc = HyperbolicIndex.__doc__
    for s in INDEX_SETTINGS:
        assert re.search(rf"^    {s.name} : ", doc, re.M), f"HyperbolicIndex docstring lacks {s.name!r}"


def test_file_header_keeps_exactly_the_saved_settings(tmp_path):
    X = np.random.default_rng(0).uniform(-0.3, 0.3, (30, 3))
    path = tmp_path / "i.hypann"
    HyperbolicIndex(algorithm="recentering", oracle="kdtree", random_state=4).build(X).save(path)
    header = read_metadata(path)
    for s in INDEX_SETTINGS:
        assert ((s.header or s.name) in header) == s.saved, s.name
        assert s.name not in header["params"]
    json.dumps(header)  # plain JSON


def _option(parser, command, flag):
    sub = next(a for a in parser._actions if a.dest == "command").choices[command]
    return next((a for a in sub._actions if flag in a.option_strings), None)


@pytest.mark.parametrize("setting", [s for s in INDEX_SETTINGS if s.cli], ids=lambda s: s.name)
def test_cli_build_options_have_the_declared_defaults(setting):
    action = _option(build_parser(), "build", setting.cli)
    assert action is not None, f"hypann build has no {setting.cli} option for {setting.name!r}"
    assert action.default == setting.default


@pytest.mark.parametrize("estimator", [hsk.HyperbolicNearestNeighbors, hsk.HyperbolicKNeighborsTransformer])
def test_sklearn_estimators_share_the_declared_defaults(estimator):
    params = estimator().get_params()
    shared = [name for name in NAMES if name in params]
    assert {"algorithm", "oracle", "model", "c", "random_state"} <= set(shared)
    for name in shared:
        assert params[name] == BY_NAME[name].default, name


# --------------------------------------------------------------------------- algorithms and oracles

from hypann._params import Param, signature_defaults  # noqa: E402
from hypann.apps.cli import _params as cli_params  # noqa: E402
from hypann.oracles import registry as oracle_registry  # noqa: E402
from hypann.search import hyperbolic_kdtree  # noqa: E402,F401 - registers the "hkdtree" oracle
from hypann.search.registry import algorithm_class, available_algorithms  # noqa: E402
from hypann.settings import DEFAULT_EVAL_K, DEFAULT_K, parameters_markdown  # noqa: E402

ALGORITHMS = available_algorithms()
ORACLES = sorted(oracle_registry._BUILTIN)
# keywords of search / knn that are not settings: the sample budget, the oracle's own
# settings, and the index's removed-row flags (passed by HyperbolicIndex, not by users)
NOT_QUERY_SETTINGS = {"self", "queries", "q_conformal", "k", "budget", "oracle_params", "removed"}


def _oracle_class(name):
    return oracle_registry._resolve(name)


def _aliases(params):
    return {a for p in params for a in p.aliases}


def _check_declaration_matches(params, init):
    sig = signature_defaults(init)
    aliases = _aliases(params)
    assert [name for name in sig if name not in aliases] == [p.name for p in params]
    for p in params:
        assert sig[p.name] == p.default, p.name
    for alias in aliases:  # a deprecated keyword defaults to None (unset)
        assert sig[alias] is None, alias


def _query_keywords(fn):
    params = inspect.signature(fn).parameters.values()
    return [p.name for p in params if p.name not in NOT_QUERY_SETTINGS and p.kind != p.VAR_KEYWORD]


@pytest.mark.parametrize("name", ALGORITHMS)
def test_algorithm_declares_its_constructor_settings(name):
    cls = algorithm_class(name)
    assert all(isinstance(p, Param) for p in cls.build_settings + cls.query_settings)
    _check_declaration_matches(cls.build_settings, cls.__init__)
    assert cls().get_params() == {p.name: p.default for p in cls.build_settings}


def test_auto_declares_no_query_settings():
    """``auto`` passes ``**params`` to the algorithm it chose (``hkdtree`` or ``brute``), which declare none."""
    assert algorithm_class("auto").query_settings == ()
    assert algorithm_class("hkdtree").query_settings == algorithm_class("brute").query_settings == ()


@pytest.mark.parametrize("name", [a for a in ALGORITHMS if a != "auto"])
def test_algorithm_declares_its_query_settings(name):
    cls = algorithm_class(name)
    assert _query_keywords(cls.search) == [p.name for p in cls.query_settings]
    assert cls.query_params == tuple(n for p in cls.query_settings for n in (p.name, *p.aliases))


@pytest.mark.parametrize("name", ORACLES)
def test_oracle_declares_its_settings(name):
    cls = _oracle_class(name)
    assert all(isinstance(p, Param) for p in cls.build_settings + cls.query_settings)
    if cls.__init__ is not object.__init__:
        _check_declaration_matches(cls.build_settings, cls.__init__)
    else:
        assert cls.build_settings == ()
    assert _query_keywords(cls._knn) == [p.name for p in cls.query_settings]


@pytest.mark.parametrize("name", ALGORITHMS + [f"oracle:{o}" for o in ORACLES])
def test_declared_defaults_are_allowed_values(name):
    cls = _oracle_class(name[7:]) if name.startswith("oracle:") else algorithm_class(name)
    for p in cls.build_settings + cls.query_settings:
        assert p.check(p.default) == p.default, p.name


@pytest.mark.parametrize("name", ALGORITHMS)
def test_make_algorithm_refuses_undeclared_settings_and_lists_the_declared(name):
    cls = algorithm_class(name)
    allowed = re.escape(str([p.name for p in cls.build_settings] or "none"))
    with pytest.raises(ValueError, match=rf"bad settings for algorithm '{name}': unknown option\(s\) \['nope'\]; "
                                         rf"allowed: {allowed}"):
        HyperbolicIndex(algorithm=name, nope=1).build(np.zeros((4, 2)))


@pytest.mark.parametrize("name", ALGORITHMS)
def test_cli_param_values_read_back_as_the_declared_defaults(name):
    cls = algorithm_class(name)
    for params in (cls.build_settings, cls.query_settings):
        items = [f"{p.name}={p.default}" for p in params]
        assert cli_params(items, params) == {p.name: p.default for p in params}


@pytest.mark.parametrize("name", [o for o in ORACLES if o not in ("faiss",)])
def test_oracle_spec_of_the_defaults_parses_back_to_them(name):
    cls = _oracle_class(name)
    items = ",".join(f"{p.name}={p.default}" for p in cls.build_settings)
    try:
        oracle = oracle_registry.make_oracle(f"{name}:{items}" if items else name)
    except ImportError:
        pytest.skip(f"{name} needs its optional library")
    assert oracle.get_params() == {p.name: p.default for p in cls.build_settings}


def test_spec_values_are_checked_against_the_declaration():
    with pytest.raises(ValueError, match=r"leaf_size must be a positive integer, got leaf_size=0$"):
        oracle_registry.make_oracle("kdtree:leaf_size=0")
    with pytest.raises(TypeError, match=r"offset must be True or False, got offset='yes'"):
        oracle_registry.make_oracle("lsh:offset=yes")
    assert oracle_registry.make_oracle("lsh:granularity=auto").granularity == "auto"


def test_docs_parameter_tables_are_generated_from_the_declarations():
    path = Path(__file__).resolve().parents[1] / "docs" / "parameters.md"
    assert path.read_text() == parameters_markdown(), (
        "docs/parameters.md is out of date: regenerate it (command at the top of the file)"
    )
    text = path.read_text()
    for name in ALGORITHMS:
        assert f"### `{name}` (" in text
    for name in ORACLES:
        assert f"### `{name}` (" in text


def test_one_default_k_for_searches_and_one_evaluation_depth():
    from hypann.apps import demo
    from hypann.datasets import base, registry
    from hypann.distributed import ShardedIndex

    assert inspect.signature(HyperbolicIndex.search).parameters["k"].default == DEFAULT_K == 1
    assert inspect.signature(ShardedIndex.search).parameters["k"].default == DEFAULT_K
    assert inspect.signature(registry.load).parameters["k"].default == DEFAULT_EVAL_K
    assert inspect.signature(base.build_dataset).parameters["k"].default == DEFAULT_EVAL_K
    assert inspect.signature(demo.run_demo).parameters["k"].default == DEFAULT_EVAL_K
    assert _option(build_parser(), "demo", "-k").default == DEFAULT_EVAL_K
    assert f"default {DEFAULT_K})" in _option(build_parser(), "search", "-k").help
    # scikit-learn's convention, on purpose
    assert hsk.HyperbolicNearestNeighbors().n_neighbors == 5
