"""Trials of a config grid: their params and hashes."""

from dataclasses import replace

from experiments.config.grid import expand, trial_from_params
from experiments.config.schema import ExperimentConfig, ModelGrid


def test_a_gold_standard_other_than_the_stored_labels_changes_the_hash():
    """Resume must not reuse a run trained on the stored labels for one trained on the raters'
    evaluator-weighted estimate."""
    from experiments.data.gold_standard import GoldStandard

    base = ExperimentConfig(feature_set=["listener"], models=[ModelGrid("ridge", {"alpha": [1.0]})])
    stored = expand(base)[0]
    ewe = expand(replace(base, gold_standard=GoldStandard("ewe", True, 3.0)))[0]
    assert stored.params()["gold_standard"] == "stored"
    assert ewe.params()["gold_standard"] == "ewe,align_lags,max_lag_s=3"
    assert ewe.hash() != stored.hash()
    assert trial_from_params(ewe.params()).hash() == ewe.hash()


def test_the_grid_is_counted_without_expanding_it():
    """grid_size is expand's length on every packaged config (smoothing methods only where
    smooth_s > 0, a model's `only` narrowing its axes, several targets)."""
    import warnings

    from experiments.config.grid import grid_size
    from experiments.config.loading import CONFIG_DIR, from_dict, load_config

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        configs = [load_config(p) for p in sorted(CONFIG_DIR.glob("*.yaml"))]
        configs.append(
            from_dict(
                {
                    "target": ["valence_self", "arousal"],
                    "postprocess": {"smooth_s": [0, 2, 4], "smooth_method": ["median", "trailing"]},
                }
            )
        )
    for cfg in (c for c in configs if c.search.method == "grid"):
        assert grid_size(cfg)[0] == len(expand(cfg)), cfg.source
