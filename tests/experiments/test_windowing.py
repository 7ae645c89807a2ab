import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from experiments.windowing import STATS, window_bounds, window_frames, window_stats


def naive_window_stats(X, fps, lengths_s, delay_s, align, stats):
    """Per-frame, per-column reference: gather the window's values and compute each statistic."""
    n, d = X.shape
    cols = []
    for L in lengths_s:
        w = max(1, int(round(L * fps)))
        dl = int(round(delay_s * fps))
        for s in stats:
            col = np.full((n, d), np.nan)
            for t in range(n):
                c = t - dl
                a, b = (c - w // 2, c + w // 2) if align == "centred" else (c - w + 1, c)
                a, b = max(a, 0), min(b, n - 1)
                frames = np.arange(a, b + 1) if a <= b else np.arange(0)
                for k in range(d):
                    v = X[frames, k]
                    ok = np.isfinite(v)
                    vals, tt = v[ok], frames[ok] / fps
                    if s == "valid_frac":
                        col[t, k] = ok.sum() / len(frames) if len(frames) else 0.0
                    elif len(vals) == 0:
                        continue
                    elif s == "mean":
                        col[t, k] = vals.mean()
                    elif s == "std":
                        col[t, k] = vals.std()
                    elif s == "min":
                        col[t, k] = vals.min()
                    elif s == "max":
                        col[t, k] = vals.max()
                    elif s == "slope" and len(vals) >= 2:
                        col[t, k] = np.polyfit(tt, vals, 1)[0]
            cols.append(col)
    return np.concatenate(cols, axis=1)


def random_data(rng, n, d, nan_frac, offset=0.0):
    X = rng.normal(size=(n, d)) * rng.uniform(0.5, 5, size=d) + offset
    X[rng.random((n, d)) < nan_frac] = np.nan
    if n > 20:
        X[5:12, 0] = np.nan  # a gap longer than a short window
    return X


@pytest.mark.parametrize("align", ["centred", "causal"])
@pytest.mark.parametrize("delay_s", [0.0, 0.4, 2.0])
def test_matches_naive_reference(align, delay_s):
    rng = np.random.default_rng(1)
    fps = 10.0
    X = random_data(rng, 80, 3, 0.2, offset=100.0)
    lengths = [0.1, 0.4, 1.5, 3.0]
    F, names = window_stats(X, fps=fps, lengths_s=lengths, delay_s=delay_s, align=align, stats=STATS)
    ref = naive_window_stats(X, fps, lengths, delay_s, align, STATS)
    assert F.shape == ref.shape == (80, 3 * len(STATS) * len(lengths))
    assert len(names) == F.shape[1]
    np.testing.assert_array_equal(np.isnan(F), np.isnan(ref))
    np.testing.assert_allclose(F, ref, rtol=1e-5, atol=1e-4)


def test_names_and_order():
    X = np.arange(12.0).reshape(6, 2)
    F, names = window_stats(X, fps=1, lengths_s=[1, 3], stats=["mean", "max"], columns=["a", "b"])
    assert names == ["a:mean@1s", "b:mean@1s", "a:max@1s", "b:max@1s",
                     "a:mean@3s", "b:mean@3s", "a:max@3s", "b:max@3s"]
    np.testing.assert_array_equal(F[:, 0], X[:, 0])  # 1-frame window = the value itself
    assert F[2, 6] == 6.0 and F[2, 7] == 7.0  # max over frames 1..3 of column a is X[3, 0]
    assert F.dtype == np.float32


def test_valid_mask_marks_missing():
    X = np.ones((10, 2))
    valid = np.ones((10, 2), bool)
    valid[:5, 1] = False
    F, _ = window_stats(X, valid, fps=1, lengths_s=[1], stats=["mean", "valid_frac"])
    assert np.isnan(F[:5, 1]).all() and (F[5:, 1] == 1).all()
    np.testing.assert_array_equal(F[:, 3], [0] * 5 + [1] * 5)
    # a 1-d mask applies to every column
    F1, _ = window_stats(X, valid[:, 1], fps=1, lengths_s=[1], stats=["mean"])
    assert np.isnan(F1[:5]).all()


def test_delay_shifts_into_the_past():
    x = np.arange(50.0)[:, None]
    F0, _ = window_stats(x, fps=5, lengths_s=[0.2], stats=["mean"])
    F2, _ = window_stats(x, fps=5, lengths_s=[0.2], delay_s=2.0, stats=["mean"])
    np.testing.assert_array_equal(F2[10:, 0], F0[:-10, 0])
    assert np.isnan(F2[:10]).all()


def test_slope_units_per_second():
    fps = 25.0
    t = np.arange(200) / fps
    F, _ = window_stats((3.0 * t - 1)[:, None], fps=fps, lengths_s=[2], stats=["slope", "std"], align="causal")
    assert np.isnan(F[0, 0])
    np.testing.assert_allclose(F[1:, 0], 3.0, rtol=1e-6)


def test_bounds():
    assert window_frames(4, 25) == 100 and window_frames(0.001, 25) == 1
    assert window_bounds(1000, 4, 2, 25, "centred") == (-100, 101)
    assert window_bounds(1000, 4, 0, 25, "causal") == (-99, 100)
    with pytest.raises(ValueError, match="align"):
        window_stats(np.ones((3, 1)), align="center")
    with pytest.raises(ValueError, match="unknown statistics"):
        window_stats(np.ones((3, 1)), stats=["median"])


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 40),
    d=st.integers(1, 3),
    lengths=st.lists(st.sampled_from([0.2, 0.4, 0.6, 1.0, 2.2, 5.0]), min_size=1, max_size=3, unique=True),
    delay=st.sampled_from([0.0, 0.2, 0.6, 3.0]),
    align=st.sampled_from(["centred", "causal"]),
    nan_frac=st.sampled_from([0.0, 0.3, 0.8, 1.0]),
    seed=st.integers(0, 2**16),
)
def test_property_matches_naive(n, d, lengths, delay, align, nan_frac, seed):
    rng = np.random.default_rng(seed)
    X = random_data(rng, n, d, nan_frac)
    fps = 5.0
    F, _ = window_stats(X, fps=fps, lengths_s=lengths, delay_s=delay, align=align, stats=STATS)
    ref = naive_window_stats(X, fps, lengths, delay, align, STATS)
    np.testing.assert_array_equal(np.isnan(F), np.isnan(ref))
    np.testing.assert_allclose(F, ref, rtol=1e-5, atol=1e-4)
    k = d * len(STATS)
    for j in range(len(lengths)):
        block = F[:, j * k : (j + 1) * k].reshape(n, len(STATS), d)
        mean, std, lo, hi, _, frac = (block[:, i] for i in range(len(STATS)))
        assert np.all((frac >= 0) & (frac <= 1))
        have = ~np.isnan(mean)
        assert np.all(lo[have] <= mean[have] + 1e-4) and np.all(mean[have] <= hi[have] + 1e-4)
        assert np.all(std[have] >= 0)
        np.testing.assert_array_equal(have, frac > 0)
