"""Every YAML the package reads refuses a key given twice and alias bombs, naming the file and line."""

from __future__ import annotations

import pytest

from experiments.config.loading import load_config
from featurestore.errors import ConfigError
from featurestore.extraction.config import load_feature_config
from featurestore.overrides import parse_override
from featurestore.sources.manifest_file import ManifestError, read_manifest
from featurestore.yaml_loader import MAX_ALIASED_NODES, YAMLRefused, load_yaml


def bomb(levels: int, width: int = 10, key: str = "lol") -> str:
    """``levels`` nested aliases of ``width`` items each: ``width ** levels`` leaves in a few lines."""
    lines = [f"{key}0: &l0 [{', '.join(['x'] * width)}]"]
    lines += [f"{key}{k}: &l{k} [{', '.join([f'*l{k - 1}'] * width)}]" for k in range(1, levels)]
    return "\n".join(lines) + "\n"


def test_a_key_given_twice_is_refused_with_both_lines(tmp_path):
    exp = tmp_path / "exp.yaml"
    exp.write_text("seed: 1\nmodels:\n  - name: ridge\n    alpha: [1]\n    alpha: [10]\nseed: 2\n")
    with pytest.raises(ConfigError) as err:
        load_config(exp)
    assert str(err.value) == f"{exp}:5: key 'alpha' given twice (first on line 4); keep one"
    fs = tmp_path / "featurestore.yaml"
    fs.write_text("face_fps: 5\nchannels: [face_geom]\nface_fps: 10\n")
    with pytest.raises(
        ConfigError, match=rf"^{fs}:3: key 'face_fps' given twice \(first on line 1\)"
    ):
        load_feature_config(fs)
    manifest = tmp_path / "sessions.yaml"
    manifest.write_text("- {session: a, video: a.mp4, video: b.mp4}\n")
    with pytest.raises(ManifestError, match=r"line 1.*key 'video' given twice"):
        read_manifest(manifest)
    with pytest.raises(ConfigError, match=r"key 'name' given twice"):
        parse_override("models.0={name: ridge, name: svr}")


def test_merge_keys_and_the_same_key_in_two_mappings_are_not_repetitions():
    text = "base: &b {alpha: 1, name: ridge}\nmodel: {<<: *b, alpha: 10}\nother: {alpha: 1}\n"
    assert load_yaml(text)["model"] == {"alpha": 10, "name": "ridge"}


def test_an_alias_bomb_is_refused_before_it_is_expanded(tmp_path):
    # 10**6 nodes: today's loader builds it and the config's checks walk every node
    exp = tmp_path / "exp.yaml"
    exp.write_text(bomb(6))
    with pytest.raises(ConfigError) as err:
        load_config(exp)
    msg = str(err.value)
    assert msg.startswith(f"{exp}:5: the aliases repeat more than {MAX_ALIASED_NODES:,} nodes")
    assert "alias *l3 here" in msg
    # the 10-line bomb that grew to 4.3 GB: refused the same way, at once
    fs = tmp_path / "featurestore.yaml"
    fs.write_text("extractors:\n  face_geom:\n" + bomb(10).replace("lol", "    lol"))
    with pytest.raises(ConfigError, match=rf"^{fs}:\d+: the aliases repeat more than"):
        load_feature_config(fs)


def test_aliases_within_the_bound_and_a_recursive_alias():
    small = load_yaml(bomb(4))  # 11,110 nodes repeated: a generous hand-written reuse
    assert len(small["lol3"]) == 10 and small["lol3"][0][0][0] == ["x"] * 10
    with pytest.raises(YAMLRefused, match=r"alias \*a is inside the node it names"):
        load_yaml("a: &a [1, *a]\n")
