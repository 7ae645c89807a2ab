import numpy as np
import pytest

from featurestore.sources import media
from tests.featurestore.helpers import make_video


def test_probe_and_frames(tmp_path):
    p = make_video(tmp_path / "Subject_1_Story_1.mp4", n_frames=50)
    info = media.probe(p)
    assert (info.width, info.height, info.fps, info.n_frames, info.has_audio) == (
        320,
        96,
        25.0,
        50,
        True,
    )
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


def test_gray_frames_are_ffmpegs_luma_and_close_to_rgb_grey(tmp_path):
    import av
    import cv2

    p = make_video(
        tmp_path / "v.mp4", n_frames=20, width=330, height=96
    )  # a row pitch wider than 330
    gray = list(media.iter_frames(p, sample_fps=5, pixel_format="gray"))
    both = list(media.iter_frames(p, sample_fps=5, pixel_format=("gray", "rgb24")))
    assert [i for i, _, _ in gray] == [i for i, _, _ in both] == [0, 5, 10, 15]
    with av.open(str(p)) as c:
        ffmpeg_gray = [
            f.to_ndarray(format="gray") for i, f in enumerate(c.decode(video=0)) if i % 5 == 0
        ]
    for (_, _, g), (_, _, images), want in zip(gray, both, ffmpeg_gray, strict=True):
        assert g.shape == (96, 330) and g.dtype == np.uint8
        np.testing.assert_array_equal(g, want)
        np.testing.assert_array_equal(images["gray"], g)
        grey_of_rgb = cv2.cvtColor(images["rgb24"], cv2.COLOR_RGB2GRAY).astype(int)
        assert np.abs(g.astype(int) - grey_of_rgb).mean() < 3
    with pytest.raises(ValueError, match="pixel format"):
        media.iter_frames(p, pixel_format="bgr24")


def test_limited_range_luma_is_stretched_to_full_range():
    import av

    frame = av.VideoFrame.from_ndarray(np.zeros((8, 6, 3), np.uint8), format="rgb24").reformat(
        format="yuv420p"
    )
    plane = frame.planes[0]
    row = np.zeros(plane.line_size, np.uint8)  # rows are padded beyond the 6 pixels
    row[:6] = [0, 16, 126, 235, 255, 100]
    plane.update(np.tile(row, 8))
    assert media.luma(frame).shape == (8, 6)
    assert media.luma(frame)[0].tolist() == [0, 0, 128, 255, 255, 98]


def test_prefetch_gives_the_same_frames_and_raises_decoding_errors(tmp_path):
    import threading

    p = make_video(tmp_path / "v.mp4", n_frames=40)
    plain = list(media.iter_frames(p, sample_fps=5))
    ahead = list(media.iter_frames(p, sample_fps=5, prefetch=2))
    assert [(i, t) for i, t, _ in ahead] == [(i, t) for i, t, _ in plain]
    for (_, _, a), (_, _, b) in zip(ahead, plain, strict=True):
        np.testing.assert_array_equal(a, b)

    before = threading.active_count()
    frames = media.iter_frames(p, prefetch=1)
    next(frames)
    frames.close()  # stops the decoding thread, which closes the file
    assert threading.active_count() == before

    cut = tmp_path / "cut.mp4"
    cut.write_bytes(p.read_bytes()[:3000])
    with pytest.raises(media.MediaError, match="cut.mp4"):
        list(media.iter_frames(cut, prefetch=2))


def _first_frame_per_sample(times: np.ndarray, sample_fps: float) -> list[float]:
    """The first of ``times`` in each 1 / sample_fps slot that holds one."""
    slots = np.floor(times * sample_fps + 1e-9)
    return [float(times[slots == s][0]) for s in np.unique(slots)]


def test_a_variable_rate_clip_gives_each_frame_its_presentation_time(tmp_path):
    rng = np.random.default_rng(3)
    keep = {0, *rng.choice(np.arange(1, 100), 59, replace=False).tolist()}  # 60 % of 4 s at 25 fps
    true = np.array(sorted(keep)) / 25
    vfr = make_video(tmp_path / "vfr.mp4", n_frames=100, width=64, height=48, keep=keep)
    cfr = make_video(tmp_path / "cfr.mp4", n_frames=100, width=64, height=48)  # the same noise
    info = media.probe(vfr)
    assert info.variable_rate and info.fps == pytest.approx(60 / 4.0, rel=0.05)
    assert not media.probe(cfr).variable_rate
    every = list(media.iter_frames(cfr))
    frames = list(media.iter_frames(vfr))
    np.testing.assert_allclose([t for _, t, _ in frames], true, atol=1e-9)
    for (_, t, image), truth in zip(frames, sorted(keep), strict=True):  # the picture of its time
        errors = [np.abs(image.astype(int) - other).mean() for _, _, other in every]
        assert int(np.argmin(errors)) == truth, t
    sampled = np.array([t for _, t, _ in media.iter_frames(vfr, sample_fps=5)])
    assert sampled.tolist() == pytest.approx(_first_frame_per_sample(true, 5), abs=1e-9)
    assert np.all(sampled - np.floor(sampled * 5 + 1e-9) / 5 < 0.2)  # within one sampled frame
    # at a constant rate the stamps are i / fps exactly, as before
    assert [t for _, t, _ in every] == [i / 25 for i in range(100)]
    assert [t for _, t, _ in media.iter_frames(cfr, 5)] == [i / 25 for i in range(0, 100, 5)]


def test_frames_without_timestamps_or_out_of_order_are_refused(tmp_path):
    import av

    def write(path, fmt):
        with av.open(str(path), "w", format=fmt) as c:
            v = c.add_stream("libx264", rate=25)  # with B-frames: AVI keeps no presentation order
            v.width, v.height, v.pix_fmt = 64, 48, "yuv420p"
            for i in range(20):
                image = np.full((48, 64, 3), i * 10, np.uint8)
                c.mux(v.encode(av.VideoFrame.from_ndarray(image, format="rgb24")))
            c.mux(v.encode())
        return path

    raw = write(tmp_path / "raw.h264", "h264")  # an elementary stream: no timestamps at all
    with pytest.raises(
        media.MediaError, match=r"raw.h264: frame 0 has no presentation timestamp.*variable"
    ):
        list(media.iter_frames(raw))
    avi = write(tmp_path / "b.avi", "avi")
    with pytest.raises(
        media.MediaError, match=r"b.avi: frame \d+ is stamped .* not after the frame before"
    ):
        list(media.iter_frames(avi, 5))
