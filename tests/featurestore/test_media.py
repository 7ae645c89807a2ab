import numpy as np
import pytest

from featurestore import media
from tests.conftest import make_video


def test_probe_and_frames(tmp_path):
    p = make_video(tmp_path / "Subject_1_Story_1.mp4", n_frames=50)
    info = media.probe(p)
    assert (info.width, info.height, info.fps, info.n_frames, info.has_audio) == (320, 96, 25.0, 50, True)
    frames = list(media.iter_frames(p, sample_fps=5))
    assert [i for i, _, _ in frames] == list(range(0, 50, 5))
    assert frames[1][1] == pytest.approx(0.2)
    assert frames[0][2].shape == (96, 320, 3) and frames[0][2].dtype == np.uint8
    assert len(list(media.iter_frames(p))) == 50


def test_audio_resampled_mono(tmp_path):
    p = make_video(tmp_path / "v.mp4", n_frames=50, sr=16000)
    y = media.read_audio(p, 8000)
    assert y.dtype == np.float32 and y.ndim == 1
    assert abs(len(y) - 2 * 8000) < 2000
    spec = np.abs(np.fft.rfft(y[1000:9000]))
    assert np.argmax(spec) * 8000 / 8000 == pytest.approx(220, abs=3)


def test_no_audio(tmp_path):
    p = make_video(tmp_path / "v.mp4", n_frames=10, audio=False)
    assert not media.probe(p).has_audio
    with pytest.raises(media.NoAudioError, match="no audio"):
        media.read_audio(p)


def test_corrupt_and_truncated(tmp_path):
    bad = tmp_path / "bad.mp4"
    bad.write_bytes(b"\x00" * 5000)
    with pytest.raises(media.MediaError, match="bad.mp4.*corrupt"):
        media.probe(bad)
    good = make_video(tmp_path / "good.mp4", n_frames=50)
    data = good.read_bytes()
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(media.MediaError, match="cut.mp4"):
        media.probe(cut)
        list(media.iter_frames(cut))


def test_role_regions():
    assert media.role_regions(2560) == {"speaker": (0, 1080), "listener": (1080, 2560)}
    assert media.role_regions(1280)["speaker"] == (0, 540)
    assert media.role_regions(1000, split_x=400)["listener"] == (400, 1000)
    with pytest.raises(ValueError, match="outside"):
        media.role_regions(100, split_x=200)
