"""A grid (or an Optuna search) larger than the limit is refused before it is expanded, naming
its axes and their sizes; --max-configurations raises the limit."""

from __future__ import annotations

import pytest

from experiments.cli import main
from experiments.config.loading import ConfigError, load_config

BIG = """feature_sets:
  listener: [listener/face_geom]
  speaker: [speaker/face_geom]
feature_set: [listener, speaker]
window:
  lengths_s: [[2], [4], [8]]
  delay_s: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
models:
  - name: ridge
    alpha: [{alphas}]
"""


def big_config(tmp_path, n_alphas: int = 1000):
    path = tmp_path / "big.yaml"
    path.write_text(BIG.format(alphas=", ".join(str(a) for a in range(1, n_alphas + 1))))
    return path


def test_a_grid_beyond_the_limit_is_refused_naming_its_axes_and_line(tmp_path):
    path = big_config(tmp_path)  # 2 x 3 x 10 x 3 x 2 x 2 x 1000 = 720,000 configurations
    with pytest.raises(ConfigError) as err:
        load_config(path)
    msg = str(err.value)
    assert msg.startswith(
        f"{path}:10: models[0].alpha: the grid has 720,000 configurations, more than the limit: "
    )
    assert "feature_set 2, window.lengths_s 3, window.delay_s 10," in msg
    assert "models[0].alpha 1,000 values" in msg and "--max-configurations N (now 10,000)" in msg
    assert load_config(path, max_configurations=720_000).models[0].params["alpha"][-1] == 1000
    # 10,080 configurations: one axis value above the default limit
    with pytest.raises(ConfigError, match="the grid has 10,080 configurations"):
        load_config(big_config(tmp_path, 14))
    assert load_config(big_config(tmp_path, 13)).feature_set == ["listener", "speaker"]


def test_an_optuna_search_is_limited_by_its_trials(tmp_path):
    with pytest.raises(ConfigError, match=r"search.n_trials: 20,000 trials, more than the limit"):
        load_config("search", overrides=["search.n_trials=20000"])
    assert load_config("search", ["search.n_trials=20000"], max_configurations=20_000)


def test_the_option_raises_the_limit_and_a_bad_value_is_a_usage_error(tmp_path, capsys):
    path = str(big_config(tmp_path))
    assert main(["sweep", "--config", path, "--print-config"]) == 2
    err = capsys.readouterr().err
    assert "the grid has 720,000 configurations" in err and "Traceback" not in err
    assert (
        main(["sweep", "--config", path, "--print-config", "--max-configurations", "1000000"]) == 0
    )
    assert "alpha: [1, 2, 3," in capsys.readouterr().out
    assert main(["sweep", "--config", path, "--print-config", "--max-configurations", "0"]) == 2
    assert "--max-configurations must be at least 1, got 0" in capsys.readouterr().err
