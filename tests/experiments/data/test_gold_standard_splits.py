"""What a gold standard reads: a session's combined label comes from that session's raters alone,
so no test rating, and none of a held-out listener's, reaches another session's label."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.data.dataset import load_sessions
from experiments.data.gold_standard import GoldStandard
from featurestore.storage.store import Channel, SessionMeta, Store

SPLITS = {"train": [2, 4], "val": [1], "test": [3]}
N = 500  # 20 s at 25 fps
LAGS = {"a": 0, "b": 12, "c": 25}  # frames: each rater's reaction lag
NOISE = {"a": 0.05, "b": 0.15, "c": 0.3}
KEYS = ["listener/face_geom"]


def _face(n: int) -> Channel:
    t = np.arange(n // 5) / 5.0
    return Channel(np.stack([t, 2 * t], axis=1), t, np.ones(t.size, bool), ["g0", "g1"])


def _truth(rng: np.random.Generator) -> np.ndarray:
    raw = rng.standard_normal(N + 200)
    smooth = np.convolve(raw, np.hanning(51) / np.hanning(51).sum(), mode="same")[100:-100]
    return smooth / np.abs(smooth).max() * 0.8


def _raters(rng: np.random.Generator, truth: np.ndarray) -> dict[str, np.ndarray]:
    out = {}
    for r, lag in LAGS.items():
        y = np.full(N, np.nan)
        y[lag:] = truth[: N - lag]
        out[f"valence@{r}"] = y + NOISE[r] * rng.standard_normal(N)
    return out


@pytest.fixture
def rated(tmp_path) -> Store:
    """3 listeners x 4 stories, three raters with their own lag and noise per session."""
    rng = np.random.default_rng(5)
    st = Store(tmp_path / "rated", mode="a")
    for listener in (1, 2, 3):
        for story in (1, 2, 3, 4):
            meta = SessionMeta(f"Subject_{listener}_Story_{story}", listener, story, 1, "bogus", N)
            st.write_session(
                meta, channels={"listener/face_geom": _face(N)}, labels=_raters(rng, _truth(rng))
            )
    return st


def _poison(st: Store, sessions: list[str]) -> None:
    """Rater ``c`` of ``sessions`` made to disagree (another time course, upside down) and rater
    ``b`` to react 1.6 s later, with 10 times the amplitude: weights and lags estimated over
    sessions pooled would move."""
    rng = np.random.default_rng(99)
    for s in sessions:
        c = -_truth(rng)
        b = 10 * np.roll(st.rater_labels(s, "valence", "b").to_numpy(), 40)
        st.write_session(st.meta(s), labels={"valence@c": c, "valence@b": b})


def _labels(st: Store, gs: GoldStandard) -> dict[str, np.ndarray]:
    tables = load_sessions(st, KEYS, "valence", SPLITS, cache=False, threads=1, gold_standard=gs)
    return {t.session: t.y for t in tables}


GOLD_STANDARDS = [
    GoldStandard("ewe"),
    GoldStandard("ewe", align_lags=True, max_lag_s=2.0),
    GoldStandard("mean", align_lags=True, max_lag_s=2.0),
]


@pytest.mark.parametrize("gs", GOLD_STANDARDS, ids=lambda g: f"{g.method}-{g.align_lags}")
def test_poisoned_test_raters_leave_every_training_label_unchanged(rated, gs):
    before = _labels(rated, gs)
    test = [s for s in before if s.endswith("_Story_3")]
    _poison(rated, test)
    after = _labels(rated, gs)
    assert any(not np.allclose(before[s], after[s], equal_nan=True) for s in test)  # it bites
    for s in set(before) - set(test):  # train and val sessions
        np.testing.assert_array_equal(after[s], before[s], err_msg=s)


@pytest.mark.parametrize("gs", GOLD_STANDARDS, ids=lambda g: f"{g.method}-{g.align_lags}")
def test_a_held_out_listeners_raters_reach_no_other_listeners_label(rated, gs):
    # the nested unseen-listener protocol fits without listener 3 on the others' labels: those
    # must not depend on listener 3's ratings, in any split
    before = _labels(rated, gs)
    held_out = [s for s in before if s.startswith("Subject_3_")]
    _poison(rated, held_out)
    after = _labels(rated, gs)
    assert any(not np.allclose(before[s], after[s], equal_nan=True) for s in held_out)
    for s in set(before) - set(held_out):
        np.testing.assert_array_equal(after[s], before[s], err_msg=s)


def test_a_sessions_gold_standard_is_the_same_whichever_sessions_are_loaded(rated):
    gs = GoldStandard("ewe", align_lags=True, max_lag_s=2.0)
    every = _labels(rated, gs)
    alone = load_sessions(
        rated,
        KEYS,
        "valence",
        sessions=["Subject_2_Story_2"],
        cache=False,
        threads=1,
        gold_standard=gs,
    )
    np.testing.assert_array_equal(alone[0].y, every["Subject_2_Story_2"])
