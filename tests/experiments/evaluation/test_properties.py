"""Property tests that complete test_metrics.py and windowing/test_stats.py.

Already there: CCC in [-1, 1], symmetry, CCC(x, x) = 1 and agreement with a covariance formula
for values in [-100, 100]; protocol means invariant to the order of rows; windowing equal to
a naive reference at 5 fps. Added here: CCC of an affine map against its closed form, CCC
against the official scorer's arithmetic (scipy's pearsonr) and at large offsets; windowing at
other frame rates and with a ``valid`` mask; the ``score`` verb invariant to the order in
which the prediction files were written.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from experiments.cli import main
from experiments.evaluation.metrics import ccc
from experiments.windowing.stats import STATS, window_stats
from tests.experiments.evaluation.helpers import official_ccc
from tests.experiments.windowing.helpers import naive_window_stats, random_data

values = st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False, allow_subnormal=False)


def series(min_size=2, max_size=200):
    return st.integers(min_size, max_size).flatmap(lambda n: arrays(np.float64, n, elements=values))


@settings(max_examples=150, deadline=None)
@given(x=series(), a=st.floats(-5, 5).filter(lambda v: abs(v) > 1e-3), b=st.floats(-5, 5))
def test_ccc_of_an_affine_map_has_a_closed_form(x, a, b):
    """y = a x + b: CCC = 2 a var(x) / (var(x) (1 + a^2) + ((1 - a) mean(x) - b)^2)."""
    assume(np.ptp(x) > 1e-3 * max(1.0, np.abs(x).max()))
    y = a * x + b
    var, mean = np.var(x), np.mean(x)
    expected = 2 * a * var / (var * (1 + a * a) + ((1 - a) * mean - b) ** 2)
    assert ccc(x, y) == pytest.approx(expected, rel=1e-7, abs=1e-9)
    assert np.sign(ccc(x, y)) == np.sign(a)


@settings(max_examples=150, deadline=None)
@given(
    pair=st.integers(2, 200).flatmap(
        lambda n: st.tuples(
            arrays(np.float64, n, elements=values), arrays(np.float64, n, elements=values)
        )
    )
)
def test_ccc_agrees_with_the_official_scorer(pair):
    t, p = pair
    assume(
        np.ptp(t) > 1e-3 and np.ptp(p) > 1e-3
    )  # the official code divides 0 by 0 for equal constants
    assert ccc(t, p) == pytest.approx(official_ccc(t, p), abs=1e-9)


@settings(max_examples=100, deadline=None)
@given(x=series(3, 100), y=series(3, 100), offset=st.sampled_from([1e4, -1e6, 3e7]))
def test_ccc_bounded_symmetric_and_one_on_itself_at_large_offsets(x, y, offset):
    n = min(len(x), len(y))
    x, y = x[:n] / 1e3 + offset, y[:n] / 1e3 + offset  # spreads of about 1 on top of a large offset
    c = ccc(x, y)
    assert -1.0 <= c <= 1.0
    assert c == pytest.approx(ccc(y, x), abs=1e-9)
    if np.ptp(x) > 1e-6 * abs(offset):
        assert ccc(x, x) == pytest.approx(1.0, abs=1e-9)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 50),
    d=st.integers(1, 3),
    fps=st.sampled_from([1.0, 2.5, 10.0, 25.0, 30.0]),
    lengths=st.lists(
        st.sampled_from([0.1, 0.5, 1.0, 1.7, 4.0]), min_size=1, max_size=2, unique=True
    ),
    delay=st.sampled_from([0.0, 0.3, 1.0, 2.5]),
    align=st.sampled_from(["centred", "causal"]),
    nan_frac=st.sampled_from([0.0, 0.2, 0.7]),
    seed=st.integers(0, 2**16),
)
def test_windowing_matches_naive_reference_at_any_frame_rate(
    n, d, fps, lengths, delay, align, nan_frac, seed
):
    rng = np.random.default_rng(seed)
    X = random_data(rng, n, d, nan_frac)
    F, names = window_stats(X, fps=fps, lengths_s=lengths, delay_s=delay, align=align, stats=STATS)
    ref = naive_window_stats(X, fps, lengths, delay, align, STATS)
    assert F.shape == ref.shape and len(names) == F.shape[1]
    np.testing.assert_array_equal(np.isnan(F), np.isnan(ref))
    np.testing.assert_allclose(F, ref, rtol=1e-5, atol=1e-4)


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 60),
    d=st.integers(1, 3),
    mask_frac=st.sampled_from([0.0, 0.3, 0.9, 1.0]),
    per_column=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_valid_mask_is_the_same_as_nan_in_the_data(n, d, mask_frac, per_column, seed):
    rng = np.random.default_rng(seed)
    X = random_data(rng, n, d, 0.1)
    valid = rng.random((n, d) if per_column else n) >= mask_frac
    masked = np.where(valid if per_column else valid[:, None], X, np.nan)
    kw = {"fps": 5.0, "lengths_s": [0.6, 2.0], "delay_s": 0.4, "stats": STATS}
    F, _ = window_stats(X, valid, **kw)
    G, _ = window_stats(masked, **kw)
    np.testing.assert_array_equal(F, G)


@pytest.fixture(scope="module")
def score_files():
    """Ground truth and predictions for 3 listeners x 3 stories of unequal lengths."""
    rng = np.random.default_rng(7)
    out = {}
    for listener in (1, 2, 3):
        for story in (1, 3, 6):
            n = int(rng.integers(40, 120))
            y = np.round(np.clip(np.cumsum(rng.normal(size=n)) / 10, -1, 1), 6)
            p = np.round(rng.uniform(0, 1) * y + rng.normal(scale=0.3, size=n), 6)
            out[f"Subject_{listener}_Story_{story}.csv"] = (y, p)
    return out


@settings(
    max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(order=st.permutations(range(9)))
def test_score_is_invariant_to_the_order_of_files(score_files, order, capsys):
    names = list(score_files)
    results = []
    for files in (names, [names[i] for i in order]):
        with tempfile.TemporaryDirectory() as tmp:
            gt, pred = Path(tmp, "gt"), Path(tmp, "pred")
            gt.mkdir()
            pred.mkdir()
            for name in files:  # written (and so listed by the file system) in this order
                y, p = score_files[name]
                (gt / name).write_text("valence\n" + "\n".join(f"{v:.6f}" for v in y) + "\n")
            for name in reversed(files):
                y, p = score_files[name]
                (pred / name).write_text("valence\n" + "\n".join(f"{v:.6f}" for v in p) + "\n")
            assert main(["score", str(gt), str(pred), "--csv", str(Path(tmp, "ccc.csv"))]) == 0
            out = capsys.readouterr().out
            results.append(
                (out.split("per-session scores written")[0], Path(tmp, "ccc.csv").read_text())
            )
    assert results[0] == results[1]
