"""The Dask executor on a local 2-worker cluster: a slow model's fit group split into its fits,
as the local executor does, with the results of the group fitted whole."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from experiments.config.loading import expand, from_dict
from experiments.data.dataset import load_sessions
from experiments.evaluation.evaluate import evaluate_trials, group_fit_parts, window_sessions
from experiments.executors.base import SweepContext, fit_groups, window_groups
from experiments.executors.dask import DaskExecutor
from tests.experiments.helpers import config_dict, dask_cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_slow_groups_fits_run_as_separate_dask_tasks_with_the_local_results(planted_store):
    from distributed import Client

    cfg = from_dict(
        config_dict(
            "mlruns",
            feature_set=["listener"],
            personalization=["global"],
            models=[{"name": "hist_gb", "max_iter": [15]}, {"name": "ridge"}],
            postprocess={"smooth_s": [2], "rescale": ["none", "train"]},
        )
    )
    trials = [replace(t, unseen_listener=True) for t in expand(cfg)]
    channels = tuple(sorted({c for t in trials for c in t.channels}))
    tables = load_sessions(planted_store, list(channels), splits=cfg.splits)
    (key,) = window_groups(trials)
    w = window_sessions(tables, key)
    local = {
        t: r for g in fit_groups(trials) for t, r in zip(g, evaluate_trials(g, w), strict=True)
    }
    slow = next(g for g in fit_groups(trials) if g[0].model == "hist_gb")
    n_parts = len(group_fit_parts(slow, w))
    assert n_parts > 10  # main, folds, and per listener: unseen and its folds
    ctx = SweepContext(
        cfg=cfg,
        store=planted_store,
        channels=channels,
        store_fingerprint="planted",
        jobs=2,
        tracking_uri="",
        experiment="",
        parent_run_id="",
        child_tags={},
        log_artifacts=False,
    )
    with dask_cluster(2) as cluster, Client(cluster) as client:
        executor = DaskExecutor(client)
        got = list(executor.run(trials, ctx))
        assert executor.split_groups == {slow[0].label(): n_parts}  # the ridge groups whole
        whole = DaskExecutor(client, split_slow=False)
        unsplit = list(whole.run(trials, ctx))
        assert whole.split_groups == {}
    for outcomes in (got, unsplit):
        assert [o.trial for o in outcomes] == trials and all(o.error == "" for o in outcomes)
        for o in outcomes:
            ref, result = local[o.trial], o.result
            assert result is not None
            assert result.metrics == ref.metrics and result.warnings == ref.warnings, (
                o.trial.label()
            )
            for sid in ref.predictions:
                np.testing.assert_array_equal(result.predictions[sid], ref.predictions[sid])
            for sid in ref.unseen_predictions:
                np.testing.assert_array_equal(
                    result.unseen_predictions[sid], ref.unseen_predictions[sid]
                )
