import numpy as np
import pytest

from experiments.config.grid import WindowKey
from experiments.config.options import STATS
from experiments.data.session_table import SessionTable
from experiments.windowing.stream import StreamingWindows
from experiments.windowing.windowed import window_sessions

CHANNELS = ["speaker/face/geom", "listener/voice/egemaps", "listener/face/au"]


def _table(n: int = 500, seed: int = 0) -> SessionTable:
    """Three channels (3, 2 and 2 columns): random walks on offsets, NaN gaps, a column that
    starts late, invalid frames, the last channel invalid throughout."""
    rng = np.random.default_rng(seed)
    column_channel = np.array([0, 0, 0, 1, 1, 2, 2])
    X = np.cumsum(rng.normal(size=(n, 7)), axis=0) * rng.uniform(0.1, 3, 7)
    X = X + rng.uniform(-300, 3000, 7)
    X[:, 3] = 20000 + X[:, 3] / 100  # small steps on a large level: the sums' centre shows
    X = X.astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    X[100:180, 1] = np.nan  # longer than the short windows
    X[:230, 4] = np.nan  # first present value late
    X[7, 0] = np.inf
    valid = rng.random((n, 3)) > 0.1
    valid[300:340, 0] = False
    valid[:, 2] = False
    columns = [f"{CHANNELS[c]}/v{i}" for i, c in enumerate(column_channel)]
    return SessionTable(
        "Subject_1_Story_1", 1, 1, "val", X, columns, valid, CHANNELS, column_channel,
        np.zeros(n, np.float32),
    )  # fmt: skip


def _streamed(t: SessionTable, key: WindowKey) -> tuple[np.ndarray, list[str]]:
    s = StreamingWindows(key, t.columns, t.channels, t.column_channel, t.fps)
    return np.stack([s.push(t.X[i], t.valid[i]) for i in range(t.n_frames)]), s.names


@pytest.mark.parametrize(
    ("channels", "lengths_s", "delay_s", "align", "stats"),
    [
        (CHANNELS, (1.0, 2.0, 4.0, 8.0), 0.0, "causal", STATS),
        (CHANNELS[::2], (2.0, 8.0), 2.0, "causal", ("slope", "valid_frac", "max", "mean")),
        (CHANNELS[1:], (1.0, 3.0), 2.0, "centred", ("std", "min", "valid_frac")),
        (CHANNELS[:1], (1.5,), 0.0, "causal", ("valid_frac",)),
        (CHANNELS, (4.0,), 2.0, "centred", ("max", "slope", "mean")),  # reads up to t exactly
    ],
)
def test_push_equals_the_batch_windows_bit_for_bit(channels, lengths_s, delay_s, align, stats):
    t = _table()
    key = WindowKey("fs", tuple(channels), lengths_s, delay_s, align, tuple(stats))
    batch = window_sessions([t], key)
    F, names = _streamed(t, key)
    assert names == batch.names
    assert F.dtype == np.float32 and F.shape == batch.sessions[0].F.shape
    assert np.array_equal(F, batch.sessions[0].F, equal_nan=True)
    assert np.isfinite(F).mean() > 0.4  # not NaN compared with NaN


def test_a_key_reading_future_frames_is_refused_with_its_lookahead():
    t = _table(10)
    key = WindowKey("fs", tuple(CHANNELS), (2.0, 4.0), 0.4, "centred", ("mean",))
    with pytest.raises(
        ValueError, match=r"40 frames \(1.6 s\).*align causal, or a delay of at least 2 s"
    ):
        StreamingWindows(key, t.columns, t.channels, t.column_channel, t.fps)
    ok = key._replace(delay_s=2.0)  # the longest window's half, 50 frames: streams
    assert StreamingWindows(ok, t.columns, t.channels, t.column_channel, t.fps).names


def test_bad_frames_and_layouts_are_refused():
    t = _table(10)
    key = WindowKey("fs", tuple(CHANNELS), (1.0,), 0.0, "causal", ("mean",))
    s = StreamingWindows(key, t.columns, t.channels, t.column_channel, t.fps)
    with pytest.raises(ValueError, match="7 values and 3 channel flags, got shapes"):
        s.push(t.X[0, :5], t.valid[0])
    with pytest.raises(KeyError, match="needs"):
        StreamingWindows(
            key._replace(channels=("scene/x",)), t.columns, t.channels, t.column_channel
        )
    with pytest.raises(ValueError, match="column_channel must give each of the 7 columns"):
        StreamingWindows(key, t.columns, t.channels, t.column_channel[:3])
