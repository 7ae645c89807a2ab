"""The egemaps extractor on synthetic audio: 1 s harmonic tone (F0 150 Hz), 1 s silence, 1 s noise."""

import pickle

import numpy as np
import pytest

from featurestore.extractors.base import _REGISTRY
from featurestore.extractors.egemaps import EgemapsConfig, EgemapsExtractor
from featurestore.sources.speaking import F0_COLUMN

F0_HZ = 150.0
DURATION_S = 3.0


def synthetic(sr: int) -> np.ndarray:
    t = np.arange(int(DURATION_S * sr)) / sr
    tone = sum(np.sin(2 * np.pi * k * F0_HZ * t) / k for k in range(1, 6))
    noise = np.random.default_rng(0).normal(scale=0.1, size=t.size)
    x = np.where(t < 1.0, 0.2 * tone, 0.0) + np.where(t >= 2.0, noise, 0.0)
    return x.astype(np.float32)


@pytest.fixture(scope="module")
def extractor():
    return EgemapsExtractor()


@pytest.fixture(scope="module")
def scene16(extractor):
    return extractor.process_signal(synthetic(16000), 16000)["scene"]


def rows(feats, start_s, end_s):
    return (feats.time >= start_s) & (feats.time < end_s)


def test_registered_with_config():
    assert _REGISTRY["egemaps"] is EgemapsExtractor
    ext = EgemapsExtractor()
    assert ext.params() == {"feature_set": "eGeMAPSv02", "sampling_rate": 16000}
    with pytest.raises(AttributeError):
        ext.config.sampling_rate = 8000  # frozen: what was computed is always known
    assert ext.config == EgemapsConfig(feature_set="eGeMAPSv02", sampling_rate=16000)


def test_columns_and_times(extractor, scene16):
    assert scene16.columns == list(extractor.smile().feature_names)
    assert len(scene16.columns) == 25 and F0_COLUMN in scene16.columns
    assert scene16.data.dtype == np.float32 and scene16.data.shape[1] == 25
    assert scene16.time[0] == 0.0
    np.testing.assert_allclose(np.diff(scene16.time), 0.01, atol=1e-9)
    assert abs(len(scene16.time) - DURATION_S / 0.01) <= 5
    assert scene16.valid.all()


def test_f0_in_tone_zero_in_silence(scene16):
    f0 = scene16.data[:, scene16.columns.index(F0_COLUMN)]
    tone = f0[rows(scene16, 0.1, 0.85)]
    assert (tone > 0).all()
    expected = 12 * np.log2(F0_HZ / 27.5)  # semitones above 27.5 Hz
    assert abs(np.median(tone) - expected) < 0.5
    assert (f0[rows(scene16, 1.1, 1.9)] == 0).all()


def test_resampled_44k_matches_16k(extractor, scene16):
    scene44 = extractor.process_signal(synthetic(44100), 44100)["scene"]
    assert scene44.data.shape == scene16.data.shape
    np.testing.assert_allclose(scene44.time, scene16.time)
    f0_col = scene16.columns.index(F0_COLUMN)
    tone = rows(scene16, 0.1, 0.85)
    assert abs(np.median(scene44.data[tone, f0_col]) - np.median(scene16.data[tone, f0_col])) < 0.2


def test_rejects_multichannel(extractor):
    with pytest.raises(ValueError, match="mono"):
        extractor.process_signal(np.zeros((2, 16000), np.float32), 16000)


def test_pickles_after_use(extractor, scene16):
    clone = pickle.loads(pickle.dumps(extractor))
    again = clone.process_signal(synthetic(16000)[:16000], 16000)["scene"]
    np.testing.assert_array_equal(again.data[:50], scene16.data[:50])
