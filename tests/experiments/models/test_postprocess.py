"""experiments.models.postprocess: smoothing per session and rescaling to training statistics."""

import numpy as np
import pytest

from experiments.models.postprocess import (
    SMOOTH_METHODS,
    Rescaler,
    StreamingSmoother,
    smooth,
    smooth_per_session,
    window_frames,
)

FPS = 25.0


def test_window_frames_is_odd_and_in_frames():
    assert window_frames(FPS, 1.0) == 25
    assert window_frames(FPS, 4.0) == 101  # 100 frames -> 101, centred
    assert window_frames(FPS, 0.0) == 1
    with pytest.raises(ValueError):
        window_frames(0.0, 1.0)


@pytest.mark.parametrize("method", SMOOTH_METHODS)
def test_zero_window_returns_input(method):
    x = np.random.default_rng(0).normal(size=50)
    np.testing.assert_array_equal(smooth(x, FPS, 0.0, method), x)


@pytest.mark.parametrize("method", SMOOTH_METHODS)
@pytest.mark.parametrize("n", [1, 2, 5, 40, 1000])
def test_constant_stays_constant_and_length_is_kept(method, n):
    x = np.full(n, 0.3)
    out = smooth(x, FPS, 4.0, method)
    assert out.shape == (n,)
    np.testing.assert_allclose(out, 0.3, atol=1e-12)


def test_moving_average_edges_shrink_the_window():
    x = np.arange(10.0)
    out = smooth(x, FPS, 0.2, "moving_average")  # 5 frames, 2 each side
    assert out[0] == pytest.approx(np.mean([0, 1, 2]))
    assert out[1] == pytest.approx(np.mean([0, 1, 2, 3]))
    assert out[5] == pytest.approx(5.0)
    assert out[-1] == pytest.approx(np.mean([7, 8, 9]))


def test_moving_average_divides_white_noise_variance_by_window():
    noise = np.random.default_rng(1).normal(size=50_000)
    window = window_frames(FPS, 1.0)
    out = smooth(noise, FPS, 1.0, "moving_average")
    ratio = noise.var() / out[window:-window].var()
    assert ratio == pytest.approx(window, rel=0.1)


def test_butterworth_keeps_low_and_removes_high_frequencies():
    t = np.arange(int(60 * FPS)) / FPS  # 60 s
    slow = np.sin(2 * np.pi * 0.05 * t)  # 0.05 Hz, well below the 0.25 Hz cutoff
    fast = np.sin(2 * np.pi * 3.0 * t)  # 3 Hz, far above it
    out_slow = smooth(slow, FPS, 4.0, "butterworth")
    out_fast = smooth(fast, FPS, 4.0, "butterworth")
    inner = slice(100, -100)
    assert np.abs(out_slow - slow)[inner].max() < 0.02
    assert np.abs(out_fast[inner]).max() < 0.01
    assert np.abs(out_fast).max() < 0.1  # edges too: no ringing from the padding


def test_butterworth_short_session():
    out = smooth(np.array([0.0, 1.0, 0.0]), FPS, 4.0, "butterworth")
    assert out.shape == (3,) and np.isfinite(out).all()


def test_median_removes_spikes_and_keeps_steps():
    x = np.r_[np.zeros(50), np.ones(50)]
    x[20] = 10.0
    out = smooth(x, FPS, 0.2, "median")
    np.testing.assert_array_equal(out, np.r_[np.zeros(50), np.ones(50)])


def test_smooth_errors():
    with pytest.raises(ValueError, match="did you mean 'median'"):
        smooth(np.zeros(5), FPS, 1.0, "medain")
    with pytest.raises(ValueError, match="1-D"):
        smooth(np.zeros((5, 2)), FPS, 1.0)
    with pytest.raises(ValueError, match="non-finite"):
        smooth(np.array([0.0, np.nan, 1.0]), FPS, 1.0)


def test_smooth_per_session_never_mixes_sessions():
    pred = np.r_[np.zeros(30), np.ones(30)]
    sessions = np.repeat(["a", "b"], 30)
    out = smooth_per_session(pred, sessions, FPS, 1.0)
    np.testing.assert_array_equal(out, pred)  # each session is constant
    mixed = smooth(pred, FPS, 1.0)
    assert not np.array_equal(mixed, pred)  # whereas smoothing across the boundary blurs it


def test_rescaler_matches_training_mean_and_std():
    rng = np.random.default_rng(2)
    y = 0.3 + 0.4 * rng.normal(size=500)
    pred = -0.1 + 0.05 * rng.normal(size=500) + 0.05 * y
    out = Rescaler("train").fit(y, pred).transform(pred)
    assert out.mean() == pytest.approx(y.mean()) and out.std() == pytest.approx(y.std())
    assert np.corrcoef(out, pred)[0, 1] == pytest.approx(1.0)  # an affine map: CCC gains, r stays
    bias = Rescaler("bias").fit(y, pred).transform(pred)
    assert bias.mean() == pytest.approx(y.mean()) and bias.std() == pytest.approx(pred.std())
    np.testing.assert_array_equal(Rescaler("none").fit(y, pred).transform(pred), pred)


def test_rescaler_per_group_with_global_fallback():
    rng = np.random.default_rng(3)
    groups = np.repeat([1, 2], 200)
    y = np.where(groups == 1, 1.0, -1.0) + np.where(groups == 1, 0.1, 0.5) * rng.normal(size=400)
    pred = 0.01 * rng.normal(size=400)
    r = Rescaler("train").fit(y, pred, groups)
    for g in (1, 2):
        rows = groups == g
        out = r.transform(pred[rows], group=g)  # one group for a whole session
        assert out.mean() == pytest.approx(y[rows].mean()) and out.std() == pytest.approx(
            y[rows].std()
        )
    # a row-wise group array gives the same numbers
    rowwise = r.transform(pred, group=groups)
    np.testing.assert_allclose(rowwise[groups == 2], r.transform(pred[groups == 2], group=2))
    # unseen group -> statistics over all training rows
    np.testing.assert_allclose(
        r.transform(pred, group=9), Rescaler("train").fit(y, pred).transform(pred)
    )


def test_rescaler_constant_predictions_shift_only():
    r = Rescaler("train").fit([0.0, 1.0, 2.0], [5.0, 5.0, 5.0])
    np.testing.assert_allclose(r.transform([5.0, 6.0]), [1.0, 2.0])


def test_rescaler_errors():
    with pytest.raises(ValueError, match="did you mean 'train'"):
        Rescaler("trian")
    with pytest.raises(RuntimeError, match="before fit"):
        Rescaler("train").transform([1.0])
    with pytest.raises(ValueError, match="rows"):
        Rescaler().fit([1.0, 2.0], [1.0])


def _noisy_sessions(seed: int = 0, n_sessions: int = 6, n_frames: int = 3000):
    """Slow labels (sines of 0.01-0.05 Hz) and predictions = labels + white noise of the
    labels' std, two listeners: (y, pred, listeners, sessions)."""
    rng = np.random.default_rng(seed)
    t = np.arange(n_frames) / FPS
    y, pred, listeners, sessions = [], [], [], []
    for i in range(n_sessions):
        label = sum(
            rng.uniform(0.3, 1)
            * np.sin(2 * np.pi * rng.uniform(0.01, 0.05) * t + rng.uniform(0, 6))
            for _ in range(3)
        )
        y.append(label)
        pred.append(label + rng.normal(0, label.std(), n_frames))
        listeners.append(np.full(n_frames, 1 + i % 2))
        sessions.append(np.full(n_frames, i))
    return tuple(np.concatenate(x) for x in (y, pred, listeners, sessions))


@pytest.mark.parametrize("method", SMOOTH_METHODS)
def test_calibration_fitted_after_smoothing_keeps_the_labels_spread(method):
    """global_calibrated's maps, fitted on predictions smoothed as those they transform: the
    calibrated, smoothed predictions have the labels' spread; fitted before smoothing (the old
    rule) the slope shrinks by var(labels) / var(predictions) = 1/2 and the spread with it."""
    from experiments.models.personalization import (
        apply_listener_calibration,
        fit_listener_calibration,
    )
    from experiments.models.postprocess import fit_smoothed_calibration

    y, pred, listeners, sessions = _noisy_sessions()
    new = fit_smoothed_calibration(y, pred, listeners, sessions, FPS, 4.0, method)
    old = fit_listener_calibration(listeners, pred, y)

    def spread(maps):
        calibrated = apply_listener_calibration(maps, listeners, pred)
        return smooth_per_session(calibrated, sessions, FPS, 4.0, method).std() / y.std()

    assert spread(new) == pytest.approx(1.0, rel=0.1)
    assert spread(old) < 0.8  # the old rule fails the same bar
    # the maps fitted here hold on new sessions smoothed the same way
    y2, pred2, listeners2, sessions2 = _noisy_sessions(seed=1)
    calibrated = apply_listener_calibration(new, listeners2, pred2)
    smoothed = smooth_per_session(calibrated, sessions2, FPS, 4.0, method)
    assert smoothed.std() / y2.std() == pytest.approx(1.0, rel=0.1)


@pytest.mark.parametrize("method", SMOOTH_METHODS)
def test_causal_methods_read_no_later_frame_and_the_others_do(method):
    from experiments.config.options import CAUSAL_SMOOTH_METHODS

    rng = np.random.default_rng(2)
    x = rng.normal(size=2000)
    later = x.copy()
    later[1001:] = rng.normal(size=999) * 5
    a, b = smooth(x, FPS, 4.0, method), smooth(later, FPS, 4.0, method)
    if method in CAUSAL_SMOOTH_METHODS:
        np.testing.assert_array_equal(a[:1001], b[:1001])
    else:
        assert not np.allclose(a[:1001], b[:1001])
    # and every method smooths: white noise loses most of its variance
    assert a[200:-200].var() < 0.1 * x.var()


def test_trailing_average_is_the_mean_of_the_frames_ending_here():
    x = np.arange(10.0)
    out = smooth(x, FPS, 0.2, "trailing")  # 5 frames ending at each frame
    assert out[0] == 0.0 and out[2] == pytest.approx(1.0)
    assert out[4] == pytest.approx(2.0) and out[9] == pytest.approx(7.0)


@pytest.mark.parametrize("method", ["trailing", "causal_butterworth"])
@pytest.mark.parametrize("smooth_s", [0.0, 0.04, 0.08, 1.0, 6.0])
def test_streaming_smoother_equals_smoothing_the_whole_session(method, smooth_s):
    # 0.04 s (one frame) and, for the filter, 0.08 s (12.5 Hz, Nyquist) pass the values through
    x = 3.0 + np.cumsum(np.random.default_rng(4).normal(size=1500)) * 0.05
    s = StreamingSmoother(method, smooth_s, FPS)
    streamed = np.array([s.push(v) for v in x])
    whole = smooth(x, FPS, smooth_s, method)
    if method == "trailing":
        np.testing.assert_array_equal(streamed, whole)
    else:
        assert np.abs(streamed - whole).max() <= 1e-12
    assert s.passthrough == (smooth_s < (0.1 if method == "causal_butterworth" else 0.05))
    assert s.passthrough or np.abs(streamed - x).max() > 0.01  # it smoothed


def test_streaming_smoother_errors():
    with pytest.raises(
        ValueError, match="'median' reads future frames.*trailing, causal_butterworth"
    ):
        StreamingSmoother("median", 1.0, FPS)
    with pytest.raises(ValueError, match="smooth_s >= 0"):
        StreamingSmoother("trailing", -1.0, FPS)
    s = StreamingSmoother("causal_butterworth", 1.0, FPS)
    s.push(0.5)
    with pytest.raises(ValueError, match="nan is not finite; smoothing needs finite predictions"):
        s.push(float("nan"))
