"""window_stats computes long sessions in blocks of frames: the blocks must not show."""

import numpy as np
import pytest

from experiments import windowing
from experiments.windowing import STATS, window_stats

from .test_windowing import naive_window_stats, random_data


@pytest.mark.parametrize("align", ["centred", "causal"])
@pytest.mark.parametrize("delay_s", [0.0, 0.7, 6.0])
def test_blocks_give_the_same_numbers_as_one_block(monkeypatch, align, delay_s):
    rng = np.random.default_rng(3)
    X = random_data(rng, 300, 4, 0.15, offset=50.0)
    X[100:160, 1] = np.nan  # a gap across a block boundary
    valid = rng.random(300) > 0.1
    kw = dict(fps=10.0, lengths_s=[0.1, 0.8, 2.5], delay_s=delay_s, align=align, stats=STATS)
    monkeypatch.setattr(windowing, "BLOCK_FRAMES", 10_000)
    whole, names = window_stats(X, valid, **kw)
    for block in (1, 7, 64):
        monkeypatch.setattr(windowing, "BLOCK_FRAMES", block)
        F, names_b = window_stats(X, valid, **kw)
        assert names_b == names
        np.testing.assert_array_equal(np.isnan(F), np.isnan(whole))
        np.testing.assert_allclose(F, whole, rtol=1e-5, atol=1e-5)


def test_blocks_match_the_naive_reference(monkeypatch):
    monkeypatch.setattr(windowing, "BLOCK_FRAMES", 16)
    rng = np.random.default_rng(4)
    X = random_data(rng, 90, 2, 0.2, offset=10.0)
    F, _ = window_stats(X, fps=10.0, lengths_s=[0.5, 2.0], delay_s=0.3, align="centred", stats=STATS)
    ref = naive_window_stats(X, 10.0, [0.5, 2.0], 0.3, "centred", STATS)
    np.testing.assert_array_equal(np.isnan(F), np.isnan(ref))
    np.testing.assert_allclose(F, ref, rtol=1e-5, atol=1e-4)
