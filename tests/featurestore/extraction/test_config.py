"""featurestore.yaml and --set: extractor settings reach the extractor, old files still load, bad keys are named."""

from __future__ import annotations

from pathlib import Path

import pytest

from featurestore.cli import main
from featurestore.extraction.config import ConfigError, FeatureConfig, load_feature_config
from featurestore.storage.store import cache_key


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "featurestore.yaml"
    path.write_text(text)
    return path


def test_extractor_settings_from_the_file_reach_the_extractor_and_its_params(tmp_path):
    path = write(
        tmp_path,
        "extractors:\n  face_au: {device: cpu, batch_size: 4}\n"
        "  face_geom: {redetect_every_s: 0.5, detect_upsample: 1}\n  egemaps:\n",
    )
    cfg = load_feature_config(path)
    au = cfg.extractor("face_au")
    assert (au.config.device, au.config.batch_size, au.config.detector) == ("cpu", 4, "Detectorv1")
    geom = cfg.extractor("face_geom")
    assert geom.params()["redetect_every_s"] == 0.5 and geom.params()["detect_upsample"] == 1
    assert geom.new_track("listener").landmarker.upsample == 1  # reaches the detector
    assert cfg.extractor("egemaps").params() == {
        "feature_set": "eGeMAPSv02",
        "sampling_rate": 16000,
    }
    assert (
        cfg.extractor("speech").params() == FeatureConfig().extractor("speech").params()
    )  # not listed: defaults
    assert cfg.to_dict()["extractors"]["face_au"]["batch_size"] == 4  # serialisable


def test_set_overrides_the_file_and_numbers_are_normalised(tmp_path):
    path = write(
        tmp_path, "face_fps: 5\nextractors: {face_geom: {detect_scale: 1, blink_threshold: 0.3}}\n"
    )
    cfg = load_feature_config(
        path,
        overrides=[
            "face_geom.blink_threshold=0.25",
            "extractors.face_au.device=cuda",
            "face_fps=10",
        ],
    )
    geom = cfg.extractor("face_geom").params()
    assert (
        geom["blink_threshold"] == 0.25
        and geom["detect_scale"] == 1.0
        and isinstance(geom["detect_scale"], float)
    )
    assert cfg.extractor_config("face_au").device == "cuda"
    assert cfg.face_fps == 10.0 and isinstance(cfg.face_fps, float)
    # `1` and `1.0` are one setting: one cache key
    one = (
        load_feature_config(overrides=["face_geom.detect_scale=1"]).extractor("face_geom").params()
    )
    one_f = (
        load_feature_config(overrides=["face_geom.detect_scale=1.0"])
        .extractor("face_geom")
        .params()
    )
    assert cache_key("src", "face_geom", "1", one) == cache_key("src", "face_geom", "1", one_f)
    assert cache_key("src", "face_geom", "1", one) != cache_key(
        "src", "face_geom", "1", FeatureConfig().extractor("face_geom").params()
    )


def test_top_level_keys(tmp_path):
    path = write(
        tmp_path,
        "face_fps: 2.5\nsplit_x: 500\nchannels: [face_geom, egemaps]\nmax_length_mismatch_s: 2\n"
        "extractors: {egemaps: {sampling_rate: 8000}}\n",
    )
    cfg = load_feature_config(path)
    assert (cfg.face_fps, cfg.split_x, cfg.channels, cfg.max_length_mismatch_s) == (
        2.5,
        500,
        ["face_geom", "egemaps"],
        2.0,
    )
    assert cfg.extractor("egemaps").sampling_rate == 8000  # the audio track is decoded at this rate
    # the keys of files older than the extractors section are unknown keys now
    for old in ("audio_sampling_rate: 8000", "face_backend: dlib"):
        with pytest.raises(ConfigError, match=f"unknown key '{old.split(':')[0]}'"):
            load_feature_config(write(tmp_path, old + "\n"))


@pytest.mark.parametrize(
    "text, expected",
    [
        (
            "extractors: {face_ua: {device: cpu}}",
            "extractors: unknown extractor 'face_ua'; did you mean 'face_au'?",
        ),
        (
            "extractors: {face_au: {devcie: cpu}}",
            "extractors.face_au.devcie: unknown setting; did you mean 'device'?",
        ),
        (
            "extractors: {face_au: {batch_size: eight}}",
            "extractors.face_au.batch_size: expected an integer, got 'eight'",
        ),
        (
            "extractors: {face_geom: {backend: mediapipe}}",
            "unknown face_geom backend 'mediapipe'; only 'dlib' is available",
        ),
        (
            "face_au: {device: cpu}",
            "'face_au' is an extractor: put its settings under `extractors:`",
        ),
        ("face_fsp: 5", "unknown key 'face_fsp'; did you mean 'face_fps'?"),
        (
            "channels: [face_geom, egemap]",
            "channels: unknown extractor 'egemap'; did you mean 'egemaps'?",
        ),
        ("extractors: {face_au: cpu}", "extractors.face_au: expected a mapping of settings"),
    ],
)
def test_bad_keys_and_values_name_the_file_the_key_and_the_nearest_name(tmp_path, text, expected):
    path = write(tmp_path, text + "\n")
    with pytest.raises(ConfigError) as e:
        load_feature_config(path)
    assert str(e.value).startswith(f"{path}") and expected in str(e.value), str(e.value)


def test_bad_set_options_are_named(tmp_path):
    with pytest.raises(
        ConfigError,
        match=r"^--set face_au.devcie=cpu: extractors.face_au.devcie: unknown setting; did you mean 'device'\?",
    ):
        load_feature_config(overrides=["face_au.devcie=cpu"])
    with pytest.raises(
        ConfigError,
        match=r"^--set face_ua.device=cpu: unknown extractor 'face_ua'; did you mean 'face_au'\?",
    ):
        load_feature_config(overrides=["face_ua.device=cpu"])
    with pytest.raises(ConfigError, match=r"^--set face_fps: expected KEY=VALUE"):
        load_feature_config(overrides=["face_fps"])


def test_cli_reports_a_bad_setting_as_a_usage_error(tmp_path, capsys):
    store = tmp_path / "features"
    assert (
        main(
            [
                "extract",
                str(tmp_path),
                "--store",
                str(store),
                "--set",
                "face_geom.redetect_evry_s=2",
            ]
        )
        == 2
    )
    err = capsys.readouterr().err
    assert (
        "--set face_geom.redetect_evry_s=2" in err
        and "did you mean 'redetect_every_s'?" in err
        and "Traceback" not in err
    )
    assert main(["extract", str(tmp_path), "--store", str(store), "--channels", "face_goem"]) == 2
    assert (
        "--channels: unknown extractor 'face_goem'; did you mean 'face_geom'?"
        in capsys.readouterr().err
    )
    assert not store.exists()


def test_config_reference_example_loads_and_its_table_lists_every_extractor_setting(tmp_path):
    """docs/config.md: its featurestore.yaml example loads, and its table names every setting of every extractor."""
    import re
    from dataclasses import fields

    from featurestore.extractors import registry

    reference = (Path(__file__).resolve().parents[3] / "docs" / "config.md").read_text(
        encoding="utf-8"
    )
    example = (
        reference.split("can be changed in a `featurestore.yaml`", 1)[1]
        .split("```yaml\n", 1)[1]
        .split("```", 1)[0]
    )
    cfg = load_feature_config(write(tmp_path, example))
    assert cfg.extractor_config("face_au").batch_size == 8 and cfg.channels == [
        "face_geom",
        "egemaps",
        "speech",
        "lexicon",
    ]
    documented: dict[str, set[str]] = {}
    name = None
    for line in reference.split("| extractor | setting | default | meaning |", 1)[1].splitlines()[
        2:
    ]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split("|")]
        name = cells[0].strip("`") or name
        documented.setdefault(name, set()).update(re.findall(r"`(\w+)`", cells[1]))
    assert documented == {
        n: {f.name for f in fields(cls.config_class)} for n, cls in registry().items()
    }


def test_transcript_channels_take_their_settings_from_the_config():
    from featurestore.extraction.derived import transcript_plan

    source = {"size": 10, "fingerprint": "abc"}
    default = transcript_plan(["speech"], 100, source)
    capped = transcript_plan(
        ["speech"], 100, source, load_feature_config(overrides=["speech.since_cap_s=30"])
    )
    assert (
        capped["speaker/speech"][2]["since_cap_s"] == 30.0
        and default["speaker/speech"][2]["since_cap_s"] == 60.0
    )
    assert capped["speaker/speech"][1] != default["speaker/speech"][1]  # another cache key
    assert capped["speaker/speech"][0].config.since_cap_s == 30.0  # the extractor that computes it
