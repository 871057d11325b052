"""The index settings declared in :mod:`hypann.settings` agree with every place that repeats them."""

from __future__ import annotations

import inspect
import json
import re

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
