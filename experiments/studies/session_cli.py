"""The ``experiments sessions CONFIG`` verb (:mod:`.session_level`), one entry of
:data:`experiments.cli.VERBS`; it imports only ``argparse`` until it runs (a quick ``--help``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from featurestore.commands import Option

#: the verb's own argument (the shared options are experiments.cli's)
CONFIG_ARGUMENT: Option = (
    ("config",),
    {
        "type": Path,
        "metavar": "CONFIG",
        "help": "session-level config (YAML): target, channels, stats, protocol, folds, models, "
        "metric (docs/config.md, 'Whole-session ratings')",
    },
)


def cmd_sessions(args: argparse.Namespace) -> int:
    """Predict a whole-session rating (one value per session, /session_labels/<target>) from
    per-session summaries of the channels (mean, std, percentiles over valid rows), with a grid
    of registered models cross-validated by person (leave-one-person-out or k folds of persons),
    scored across sessions by Pearson r, CCC and MAE and chosen by the config's metric. Logged
    to MLflow as a parent run with a child run per configuration (resumed as a sweep's)."""
    # startup: numpy, pandas, scikit-learn and MLflow load when the verb runs, not for --help
    from .session_config import load_session_config
    from .session_level import run_sessions

    cfg = load_session_config(args.config, args.overrides)
    res = run_sessions(
        cfg, args.store or "features", args.out, args.tracking_uri, resume=args.resume
    )
    print(res.files[1].read_text())
    print(f"written: {', '.join(str(f) for f in res.files)}; MLflow parent run {res.parent_run_id}")
    return 0
