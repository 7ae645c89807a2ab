"""The ``experiments sessions CONFIG`` verb (whole-session ratings, :mod:`.session_level`).

Its own module, imported by :mod:`experiments.cli` for :data:`~experiments.cli.VERBS`: it
imports only ``argparse`` until the verb runs, so ``experiments --help`` stays quick. Errors are
:class:`~.session_level.SessionLevelError`, a config error: exit code 2 with the message.
"""

from __future__ import annotations

import argparse
import inspect
from pathlib import Path

#: the store read without --store (as the other verbs)
DEFAULT_STORE = "features"


def add_sessions(sub: argparse._SubParsersAction) -> None:
    """The ``sessions`` verb's parser."""
    p = sub.add_parser(
        "sessions",
        help="whole-session ratings: models over session summaries, CV by person -> MLflow, "
        "reports/summary_sessions.{md,csv}",
        description=inspect.getdoc(cmd_sessions),
    )
    p.add_argument(
        "config",
        type=Path,
        metavar="CONFIG",
        help="session-level config (YAML): target, channels, stats, protocol, folds, models "
        "(docs/config.md, 'Whole-session ratings')",
    )
    p.add_argument(
        "--store",
        default=DEFAULT_STORE,
        metavar="DIR",
        help="feature store folder (default: features/)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a top-level config key, VALUE parsed as YAML (e.g. --set protocol=kfold_person)",
    )
    p.add_argument(
        "--tracking-uri",
        default=None,
        help="MLflow tracking URI (default: the config's tracking_uri)",
    )
    p.add_argument(
        "--out", default="reports", help="folder for summary_sessions.md/.csv (default: reports/)"
    )
    p.set_defaults(func=cmd_sessions)


def cmd_sessions(args: argparse.Namespace) -> int:
    """Predict a whole-session rating (one value per session, /session_labels/<target>) from
    per-session summaries of the channels (mean, std, percentiles over valid rows), with a small
    grid of models cross-validated by person (leave-one-person-out or k folds of persons), scored
    across sessions by Pearson r, CCC and MAE. Logged to MLflow as a parent run with a child run
    per configuration."""
    # startup: numpy, pandas, scikit-learn and MLflow load when the verb runs, not for --help
    import yaml

    from featurestore import Store  # startup, as above

    from .session_level import SessionLevelError, load_session_config, run_sessions

    overrides = {}
    for item in args.overrides:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SessionLevelError(f"--set {item!r}: expected KEY=VALUE")
        overrides[key.strip()] = yaml.safe_load(value)
    if not Path(args.store).is_dir() or not Store(args.store).list_sessions():
        raise SessionLevelError(
            f"feature store {args.store}: no shards there; build it with `featurestore extract` "
            "(a manifest with rating_<target> columns stores the ratings), or pass --store"
        )
    cfg = load_session_config(args.config, overrides)
    res = run_sessions(cfg, args.store, out_dir=args.out, tracking_uri=args.tracking_uri)
    print(res.files[1].read_text())
    print(f"written: {', '.join(str(f) for f in res.files)}; MLflow parent run {res.parent_run_id}")
    return 0
