"""Where a sweep's child runs are logged, and how: :class:`SweepContext` (the parent process
logs with it, and so does a Dask worker that logs its own runs)."""

from __future__ import annotations

from dataclasses import dataclass

from ..config.schema import ExperimentConfig


@dataclass(frozen=True)
class SweepContext:
    """The ``cfg`` (a target's, in a sweep of several), the tracking store and experiment, the
    parent run, the tags every child gets and whether artifacts are logged."""

    cfg: ExperimentConfig
    tracking_uri: str
    experiment: str
    parent_run_id: str
    child_tags: dict[str, str]
    log_artifacts: bool = True
