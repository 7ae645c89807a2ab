import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from experiments.windowing.stats import STATS, window_bounds, window_frames, window_stats
from tests.experiments.windowing.helpers import naive_window_stats, random_data


@pytest.mark.parametrize("align", ["centred", "causal"])
@pytest.mark.parametrize("delay_s", [0.0, 0.4, 2.0])
def test_matches_naive_reference(align, delay_s):
    rng = np.random.default_rng(1)
    fps = 10.0
    X = random_data(rng, 80, 3, 0.2, offset=100.0)
    lengths = [0.1, 0.4, 1.5, 3.0]
    F, names = window_stats(
        X, fps=fps, lengths_s=lengths, delay_s=delay_s, align=align, stats=STATS
    )
    ref = naive_window_stats(X, fps, lengths, delay_s, align, STATS)
    assert F.shape == ref.shape == (80, 3 * len(STATS) * len(lengths))
    assert len(names) == F.shape[1]
    np.testing.assert_array_equal(np.isnan(F), np.isnan(ref))
    np.testing.assert_allclose(F, ref, rtol=1e-5, atol=1e-4)


def test_names_and_order():
    X = np.arange(12.0).reshape(6, 2)
    F, names = window_stats(X, fps=1, lengths_s=[1, 3], stats=["mean", "max"], columns=["a", "b"])
    assert names == [
        "a:mean@1s",
        "b:mean@1s",
        "a:max@1s",
        "b:max@1s",
        "a:mean@3s",
        "b:mean@3s",
        "a:max@3s",
        "b:max@3s",
    ]
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
    F, _ = window_stats(
        (3.0 * t - 1)[:, None], fps=fps, lengths_s=[2], stats=["slope", "std"], align="causal"
    )
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
    lengths=st.lists(
        st.sampled_from([0.2, 0.4, 0.6, 1.0, 2.2, 5.0]), min_size=1, max_size=3, unique=True
    ),
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


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize(("align", "delay_s"), [("centred", 0.0), ("causal", 0.6)])
def test_wide_input_matches_naive_reference(dtype, align, delay_s):
    # more columns than one vector register holds, and not a multiple of one (loop remainders)
    rng = np.random.default_rng(5)
    X = random_data(rng, 45, 37, 0.25, offset=50.0).astype(dtype)
    valid = rng.random(45) > 0.1
    lengths = [0.2, 1.4, 3.0]
    F, names = window_stats(
        X, valid, fps=5.0, lengths_s=lengths, delay_s=delay_s, align=align, stats=STATS
    )
    ref = naive_window_stats(
        np.where(valid[:, None], X.astype(np.float64), np.nan), 5.0, lengths, delay_s, align, STATS
    )
    assert F.shape == ref.shape and len(names) == F.shape[1]
    np.testing.assert_array_equal(np.isnan(F), np.isnan(ref))
    np.testing.assert_allclose(F, ref, rtol=1e-5, atol=1e-4)


def test_infinite_values_are_missing():
    rng = np.random.default_rng(2)
    X = random_data(rng, 30, 3, 0.1)
    X[[3, 10, 11], 1] = [np.inf, -np.inf, np.inf]
    kw = {"fps": 5.0, "lengths_s": [0.6, 2.0], "stats": STATS}
    F, _ = window_stats(X, **kw)
    G, _ = window_stats(np.where(np.isinf(X), np.nan, X), **kw)
    np.testing.assert_array_equal(F, G)
    assert np.isfinite(F[~np.isnan(F)]).all()


def test_all_missing_column_and_the_others_unaffected():
    rng = np.random.default_rng(3)
    X = random_data(rng, 25, 3, 0.2)
    X[:, 1] = np.nan
    F, _ = window_stats(X, fps=5.0, lengths_s=[1.0], stats=STATS)
    block = F.reshape(25, len(STATS), 3)
    assert np.isnan(block[:, :5, 1]).all()  # mean, std, min, max, slope
    assert (block[:, 5, 1] == 0).all()  # valid_frac
    alone, _ = window_stats(X[:, [0, 2]], fps=5.0, lengths_s=[1.0], stats=STATS)
    np.testing.assert_array_equal(block[:, :, [0, 2]].reshape(25, -1), alone)


def test_window_longer_than_the_session_covers_all_of_it():
    x = np.array([3.0, np.nan, 1.0, 4.0, 1.5])
    F, _ = window_stats(x, fps=1.0, lengths_s=[100.0], stats=STATS)
    present = x[~np.isnan(x)]
    expected = [present.mean(), present.std(), present.min(), present.max()]
    np.testing.assert_allclose(F[:, :4], np.tile(expected, (5, 1)), rtol=1e-6)
    np.testing.assert_allclose(F[:, 5], 0.8)  # 4 of the 5 frames present


def test_single_frame():
    F, _ = window_stats(np.array([[2.5, np.nan]]), fps=25.0, lengths_s=[4.0], stats=STATS)
    assert F.shape == (1, 2 * len(STATS))
    mean, std, lo, hi, slope, frac = F.reshape(len(STATS), 2).T[0]
    assert (mean, std, lo, hi, frac) == (2.5, 0.0, 2.5, 2.5, 1.0) and np.isnan(slope)
    assert np.isnan(F.reshape(len(STATS), 2)[:5, 1]).all()


def test_float32_float64_and_integer_input_agree():
    rng = np.random.default_rng(4)
    X = np.round(rng.normal(size=(60, 4)) * 100)
    kw = {"fps": 10.0, "lengths_s": [0.5, 2.0], "delay_s": 0.3, "stats": STATS}
    F64, _ = window_stats(X, **kw)
    F32, _ = window_stats(X.astype(np.float32), **kw)
    Fint, _ = window_stats(X.astype(np.int32), **kw)
    np.testing.assert_array_equal(Fint, F64)
    np.testing.assert_allclose(F32, F64, rtol=1e-6, atol=1e-4)
    k = 4 * len(STATS)  # min and max are exact in either type
    for j in range(2):
        np.testing.assert_array_equal(
            F32[:, j * k + 8 : j * k + 16], F64[:, j * k + 8 : j * k + 16]
        )


def test_any_memory_layout_gives_the_same_numbers():
    rng = np.random.default_rng(6)
    X = random_data(rng, 40, 8, 0.2).astype(np.float32)
    valid = rng.random((40, 8)) > 0.2
    kw = {"fps": 5.0, "lengths_s": [0.6, 2.2], "delay_s": 0.4, "stats": STATS}
    ref, _ = window_stats(
        np.ascontiguousarray(X[:, ::2]), np.ascontiguousarray(valid[:, ::2]), **kw
    )
    for x, v in [
        (X[:, ::2], valid[:, ::2]),  # strided views
        (np.asfortranarray(X[:, ::2]), np.asfortranarray(valid[:, ::2])),
        (X[:, [0, 2, 4, 6]], valid.T[::2].T),
    ]:
        F, _ = window_stats(x, v, **kw)
        np.testing.assert_array_equal(F, ref)


def test_out_writes_into_a_column_block_of_a_larger_matrix():
    rng = np.random.default_rng(7)
    X = random_data(rng, 30, 3, 0.2)
    kw = {"fps": 5.0, "lengths_s": [0.6, 2.0], "stats": ["mean", "max", "slope"]}
    F, _ = window_stats(X, **kw)
    big = np.full((30, F.shape[1] + 5), -7.0, dtype=np.float32)
    G, _ = window_stats(X, out=big[:, 2 : 2 + F.shape[1]], **kw)
    assert G.base is big
    np.testing.assert_array_equal(big[:, 2 : 2 + F.shape[1]], F)
    assert (big[:, :2] == -7).all() and (big[:, 2 + F.shape[1] :] == -7).all()
    fortran = np.zeros(F.shape, dtype=np.float32, order="F")  # not rows of a row-major matrix
    window_stats(X, out=fortran, **kw)
    np.testing.assert_array_equal(fortran, F)
    with pytest.raises(ValueError, match="out must be a float32 array of shape"):
        window_stats(X, out=np.empty(F.shape), **kw)


def test_a_statistic_asked_twice_and_bad_masks():
    X = np.arange(20.0).reshape(10, 2)
    F, names = window_stats(X, fps=1.0, lengths_s=[3], stats=["mean", "max", "mean"])
    np.testing.assert_array_equal(F[:, 0:2], F[:, 4:6])
    assert names[0] == names[4] == "c0:mean@3s"
    with pytest.raises(ValueError, match=r"valid must have shape \(10,\)"):
        window_stats(X, np.ones((10, 3), bool), fps=1.0)


def test_running_sums_do_not_drift_after_large_values():
    # the sums are slid frame by frame through a long session: huge values passing through
    # the window must not spoil the small ones after them
    rng = np.random.default_rng(8)
    n, fps = 30000, 25.0
    x = 1000.0 + rng.normal(size=n)
    x[[2000, 9000, 20000]] = 1e6
    x[25000:25300] = 1000.0  # constant: std exactly 0
    F, _ = window_stats(x, fps=fps, lengths_s=[4.0], stats=["mean", "std", "slope"])
    for t in (1000, 5000, 15000, 29000):
        w = x[t - 50 : t + 51]
        assert F[t, 0] == pytest.approx(w.mean(), rel=1e-7)
        assert F[t, 1] == pytest.approx(w.std(), rel=1e-5)
        assert F[t, 2] == pytest.approx(
            np.polyfit(np.arange(101) / fps, w, 1)[0], rel=1e-4, abs=1e-5
        )
    # a constant stretch: the squares of the 1e6 values leave rounding of their size's ulp
    # (1e-4) in the running sum of squares, which shows as a std up to about 1e-2 (1e-8 of the
    # spikes) or 0, by its sign; the slope's sums hold no squares of the values
    assert np.abs(F[25100:25200, 1]).max() < 1e-2 and np.abs(F[25100:25200, 2]).max() < 1e-6


def test_one_value_or_none_after_a_gap_is_exact():
    """Sparse columns (a voice channel valid only while its role talks): a window holding one
    value has std 0 and slope NaN exactly, whatever rounding the running sums gathered before
    the gap; the first windows after a gap match a fresh computation on that stretch alone."""
    rng = np.random.default_rng(3)
    n = 6000
    x = rng.normal(1000.0, 400.0, size=(n, 3))
    x[2000:2400] = np.nan  # a 16 s gap
    x[2200] = [1313.77, -250.0, 7.0]  # one lone value inside it
    F, names = window_stats(x, fps=25.0, lengths_s=[2.0], stats=["mean", "std", "slope"])
    mean, std, slope = F[:, :3], F[:, 3:6], F[:, 6:9]
    lone = slice(2200 - 25, 2200 + 26)  # every 2 s window (51 frames) around the lone value
    np.testing.assert_array_equal(std[lone], 0.0)
    assert np.isnan(slope[lone]).all()
    np.testing.assert_allclose(
        mean[lone], np.repeat(x[2200:2201].astype(np.float32), 51, axis=0), rtol=1e-7
    )
    fresh, _ = window_stats(x[2400:], fps=25.0, lengths_s=[2.0], stats=["mean", "std", "slope"])
    np.testing.assert_allclose(F[2425:2600], fresh[25:200], rtol=1e-6, atol=1e-6)
