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
