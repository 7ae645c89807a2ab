import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from experiments.evaluation.metrics import (
    ccc,
    listener_means,
    protocol_means,
    score_matrix,
    story_means,
)
from tests.experiments.evaluation.helpers import official_ccc


def test_matches_official_scorer_arithmetic():
    rng = np.random.default_rng(0)
    for _ in range(20):
        n = int(rng.integers(50, 3000))
        y = np.clip(np.cumsum(rng.normal(size=n)) / 30, -1, 1)
        p = 0.5 * y + rng.normal(scale=rng.uniform(0.05, 1), size=n) + rng.uniform(-0.5, 0.5)
        assert ccc(y, p) == pytest.approx(official_ccc(y, p), abs=1e-12)


def test_constant_inputs():
    y = np.linspace(-1, 1, 100)
    assert ccc(y, np.zeros(100)) == 0.0  # r undefined -> 0, as the official scorer
    assert ccc(np.full(10, 0.3), np.full(10, 0.5)) == 0.0
    assert ccc(np.full(10, 0.3), np.full(10, 0.3)) == 0.0  # official gives NaN (0/0); documented
    assert ccc(y, y) == pytest.approx(1.0)
    assert ccc(y, -y) == pytest.approx(-1.0)
    assert ccc(y, y + 1) < ccc(y, y + 0.1) < 1.0  # a bias lowers CCC, not Pearson's r


def test_bad_inputs_raise():
    with pytest.raises(ValueError, match="3 values but prediction has 2"):
        ccc([1, 2, 3], [1, 2])
    with pytest.raises(ValueError, match="prediction has 1 NaN"):
        ccc([1, 2, 3], [1, np.nan, 3])
    with pytest.raises(ValueError, match="empty"):
        ccc([], [])


finite = st.floats(-100, 100, allow_nan=False, allow_infinity=False, allow_subnormal=False)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(finite, finite), min_size=1, max_size=60))
def test_ccc_properties(pairs):
    a = np.array([p[0] for p in pairs])
    b = np.array([p[1] for p in pairs])
    c = ccc(a, b)
    assert -1.0 <= c <= 1.0
    assert c == pytest.approx(ccc(b, a), abs=1e-12)
    if np.var(a) > 1e-9:
        assert ccc(a, a) == pytest.approx(1.0, abs=1e-9)
    if np.var(a) > 1e-6 and np.var(b) > 1e-6:
        cov = np.cov(a, b, bias=True)
        ref = 2 * cov[0, 1] / (cov[0, 0] + cov[1, 1] + (a.mean() - b.mean()) ** 2)
        assert c == pytest.approx(ref, abs=1e-9)


def rows_from(matrix):
    return [
        {"listener": L, "story": S, "ccc": v} for L, row in matrix.items() for S, v in row.items()
    ]


def test_protocols_complete_and_ragged():
    full = rows_from({1: {1: 0.1, 2: 0.3}, 2: {1: 0.5, 2: 0.7}})
    p = protocol_means(full)
    assert p["personalized"] == pytest.approx(0.4) and p["generalized"] == pytest.approx(0.4)
    ragged = rows_from({1: {1: 0.2, 2: 0.4, 3: 0.9}, 2: {1: 0.6}})
    p = protocol_means(pd.DataFrame(ragged))
    # listeners: 1 -> 0.5, 2 -> 0.6; stories: 1 -> 0.4, 2 -> 0.4, 3 -> 0.9
    assert p["personalized"] == pytest.approx(0.55)
    assert p["generalized"] == pytest.approx((0.4 + 0.4 + 0.9) / 3)
    assert listener_means(ragged).to_dict() == pytest.approx({1: 0.5, 2: 0.6})
    assert story_means(ragged).to_dict() == pytest.approx({1: 0.4, 2: 0.4, 3: 0.9})


def test_matrix_and_errors():
    m = score_matrix(rows_from({2: {3: 0.1}, 1: {3: 0.2, 1: -0.3}}))
    assert list(m.index) == [1, 2] and list(m.columns) == [1, 3]
    assert m.loc[1, 1] == -0.3 and np.isnan(m.loc[2, 1])
    with pytest.raises(ValueError, match=r"more than one row for \(listener, story\) \[\(1, 1\)\]"):
        protocol_means(rows_from({1: {1: 0.1}}) * 2)
    with pytest.raises(ValueError, match="lacks columns"):
        protocol_means(pd.DataFrame({"listener": [1], "ccc": [0.1]}))


@settings(max_examples=30, deadline=None)
@given(
    cells=st.dictionaries(
        st.tuples(st.integers(1, 6), st.integers(1, 8)),
        st.floats(-1, 1, allow_nan=False),
        min_size=1,
        max_size=30,
    ),
    seed=st.integers(0, 1000),
)
def test_protocols_invariant_to_row_order(cells, seed):
    df = pd.DataFrame([{"listener": L, "story": S, "ccc": v} for (L, S), v in cells.items()])
    shuffled = df.sample(frac=1.0, random_state=seed)
    assert protocol_means(df) == protocol_means(shuffled)
    p = protocol_means(df)
    by_l = df.groupby("listener")["ccc"].mean().mean()
    by_s = df.groupby("story")["ccc"].mean().mean()
    assert p["personalized"] == pytest.approx(by_l) and p["generalized"] == pytest.approx(by_s)
    assert -1 <= p["personalized"] <= 1 and -1 <= p["generalized"] <= 1
