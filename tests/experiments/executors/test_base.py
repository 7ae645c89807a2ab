"""Executors by name: one registered from this module alone runs a sweep named in the config, with
the local executor's results; an unknown name is refused with the nearest one."""

from __future__ import annotations

from collections.abc import Generator, Sequence

import pytest
from mlflow import MlflowClient

from experiments.config.grid import Trial
from experiments.config.loading import from_dict
from experiments.executors.base import (
    Executor,
    Outcome,
    SweepContext,
    fit_groups,
    make_executor,
    register_executor,
)
from experiments.executors.local import LocalExecutor
from experiments.studies.sweep import run_sweep
from experiments.tracking.tracker import CONFIG_HASH_TAG, resolve_tracking_uri
from featurestore.overrides import ConfigError
from tests.experiments.helpers import assert_same_metrics, config_dict


@register_executor
class OneGroupAtATime(Executor):
    """The local executor asked for one fit group at a time, in reverse order, and the outcomes
    put back in order: another way to run, the same numbers."""

    name = "one_group_at_a_time"

    def run(self, todo: Sequence[Trial], ctx: SweepContext) -> Generator[Outcome, None, None]:
        outcomes = {}
        for group in reversed(fit_groups(todo)):
            outcomes.update({o.trial: o for o in LocalExecutor().run(list(group), ctx)})
        yield from (outcomes[t] for t in todo)


def test_an_unknown_executor_is_refused_with_the_nearest_name():
    with pytest.raises(ConfigError, match="unknown executor 'dsak'.*did you mean 'dask'"):
        make_executor("dsak")
    with pytest.raises(ConfigError, match="--scheduler .* is for --executor dask"):
        make_executor("local", scheduler="tcp://host:8786")
    assert make_executor("dask", scheduler="tcp://host:8786").scheduler == "tcp://host:8786"
    with pytest.raises(ConfigError, match="executor: expected a name"):
        from_dict({"executor": "two words"})


@pytest.mark.integration
def test_an_executor_registered_here_runs_the_sweep_its_config_names(
    planted_store, tracking_dir, local_reference
):
    cfg = from_dict(
        {**config_dict(tracking_dir, "executor-by-name"), "executor": OneGroupAtATime.name}
    )
    res = run_sweep(cfg, store=planted_store, progress=False, log_artifacts=False)
    assert res.n_failed == 0 and sorted(res.table[CONFIG_HASH_TAG]) == sorted(local_reference.index)
    assert_same_metrics(res.table, local_reference)
    parent = MlflowClient(resolve_tracking_uri(tracking_dir)).get_run(res.parent_run_id)
    assert parent.data.tags["executor"] == OneGroupAtATime.name
