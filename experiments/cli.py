"""``experiments`` command line.

Each verb is a pair of functions: ``add_<verb>(subparsers)`` declares its arguments and
``cmd_<verb>(args) -> int`` runs it (:func:`add_verb` names the verb after ``cmd_<verb>``, whose
docstring is the verb's ``--help`` description); :data:`VERBS` lists the ``add_*`` functions. A verb that
works from an experiment config calls :func:`add_config_options`, and :func:`main` then loads
the config (``--config``, every ``--set KEY=VALUE``) into ``args.cfg`` before the verb runs, and
handles ``--print-config`` (print the resolved config, exit 0) for it.

Exit codes: 0 all good, 1 some sessions or configurations failed (the message says which),
2 usage error (bad arguments, bad config).
"""

from __future__ import annotations

import argparse
import inspect
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

from featurestore import Store, __version__
from featurestore.overrides import ConfigError
from featurestore.processes import terminate_as_interrupt

# Each verb imports what it runs when it runs (the training verbs: scikit-learn, XGBoost, MLflow,
# about 2 s), so that `experiments --help` starts at once; tests/test_layout.py still counts these
# imports when it looks for cycles. `main` needs the config's errors whatever the verb.
from .config.loading import load_config
from .config.options import ConfigWarning
from .studies.session_cli import add_sessions

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class UsageError(Exception):
    """Bad command-line input; :func:`main` prints it and exits with code 2."""


# --------------------------------------------------------------------- shared options
def add_verb(
    sub: argparse._SubParsersAction,
    func: Callable[[argparse.Namespace], int],
    help: str,
    **defaults: object,
) -> argparse.ArgumentParser:
    """The parser of the verb ``func`` runs (``cmd_score`` -> ``score``), described in its ``--help``
    by ``func``'s docstring; ``defaults`` are set on its arguments."""
    p = sub.add_parser(
        func.__name__.removeprefix("cmd_"), help=help, description=inspect.getdoc(func)
    )
    p.set_defaults(func=func, **defaults)
    return p


def add_config_options(p: argparse.ArgumentParser, default: str = "default") -> None:
    """``--config FILE`` (``default``: the packaged config the verb reads without it),
    repeatable ``--set KEY=VALUE`` and ``--print-config``."""
    p.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="experiment config (YAML), or a packaged name: default, ablation, smoke, search, "
        f"causal (default: {default}, i.e. experiments/configs/{default}.yaml)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config entry; dotted KEY, VALUE parsed as YAML; repeatable "
        "(e.g. --set window.delay_s=[2] --set models.2.alpha=[1,10]: list items by index)",
    )
    p.add_argument(
        "--print-config",
        action="store_true",
        help="print the resolved config and exit (with --store: after checking its target and "
        "channels against the store)",
    )
    p.set_defaults(takes_config=True, config_default=default)


#: the store a verb reads when --store is not given
DEFAULT_STORE = "features"


def config_from_args(args: argparse.Namespace):
    """The :class:`~experiments.config.schema.ExperimentConfig` named by ``--config`` and ``--set``,
    checked against the store (``--store``, else ``features/``) unless only ``--print-config``
    was asked for without ``--store``."""
    store = getattr(args, "store", None)  # a verb without --store reads no store
    if store is None and not args.print_config and hasattr(args, "store"):
        store = args.store = DEFAULT_STORE
    path = args.config or args.config_default
    names = None
    if store is not None:
        from .config.store_check import store_names  # startup: see the imports above

        try:
            names = store_names(store, require_channels=args.verb != "agreement")
        except ConfigError:  # no store to check against: the config's own problems first
            load_config(path, overrides=args.overrides)
            raise
    return load_config(path, overrides=args.overrides, store=names)


# --------------------------------------------------------------------- score
def add_score(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        cmd_score,
        help="score challenge-format predictions against ground truth (both protocols)",
    )
    p.add_argument(
        "ground_truth_dir",
        type=Path,
        metavar="GROUND_TRUTH_DIR",
        help="folder of the true Subject_<L>_Story_<S>.csv ratings (may hold every split)",
    )
    p.add_argument(
        "prediction_dir",
        type=Path,
        metavar="PREDICTION_DIR",
        help="folder of predicted Subject_<L>_Story_<S>.csv files (experiments export writes them)",
    )
    p.add_argument(
        "--csv",
        type=Path,
        default=None,
        metavar="FILE",
        help="also write session, listener, story, ccc to FILE",
    )
    p.add_argument(
        "--split",
        choices=["train", "val", "test"],
        default=None,
        help="score the stories of this official split (test: 3, 6, 7); default: the stories that "
        "have predictions. Either way every listener of a scored story needs a prediction",
    )


def cmd_score(args: argparse.Namespace) -> int:
    """Read Subject_<L>_Story_<S>.csv files (header `valence`, one row per frame) from both folders,
    pair them by session, and print the per-session CCC (listeners x stories) and the
    personalized and generalized protocol means, as the official challenge scorer does.
    The ground truth may hold every split: the stories scored are those with predictions (or
    --split's), and the sessions left out are listed. Exit 1 when the files of the scored
    stories do not pair up."""
    # startup: see the imports above
    from .evaluation.score_files import print_scores, score_folders

    try:
        scored = score_folders(args.ground_truth_dir, args.prediction_dir, args.split)
    except NotADirectoryError as e:
        raise UsageError(str(e)) from e
    if scored.problems:
        print(f"cannot score: {len(scored.problems)} problem(s)", file=sys.stderr)
        for msg in scored.problems:
            print(f"  {msg}", file=sys.stderr)
        return EXIT_FAILED
    print_scores(scored, args.csv)
    return EXIT_OK


# --------------------------------------------------------------------- sweep / ablate / export
def _store_and_tracking(p: argparse.ArgumentParser) -> None:
    _store_option(p)
    p.add_argument(
        "--tracking-uri",
        default=None,
        help="MLflow tracking URI (default: the config's tracking.uri, mlruns/ -> sqlite:///mlruns/mlflow.db)",
    )
    p.add_argument(
        "--jobs",
        type=int,
        default=None,
        help="configurations evaluated in parallel processes (default: the config's jobs, else 1)",
    )
    p.add_argument(
        "--executor",
        default=None,
        metavar="NAME",
        help="where configurations run: local (this machine) or dask (a cluster); default: the "
        "config's executor",
    )
    p.add_argument(
        "--scheduler",
        default=None,
        help="address of an existing Dask scheduler (with --executor dask)",
    )
    p.add_argument(
        "--no-resume",
        dest="resume",
        action="store_false",
        help="run every configuration again, even those with a finished run by the same code on the same store",
    )


def _store_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--store",
        default=None,
        metavar="DIR",
        help="feature store folder (default: features/); the config's target and channels are "
        "checked against it before anything runs",
    )


def _check_store(store: str) -> None:
    if not Path(store).is_dir():
        raise UsageError(
            f"feature store {store}: no such folder; build it with `make features` (or "
            f"`featurestore extract DATA_DIR --store {store}`), or pass its folder with --store"
        )
    if not Store(store).list_sessions():
        raise UsageError(
            f"no shards in {store}; run `make features` (or `featurestore extract DATA_DIR --store {store}`) first"
        )


def _print_sweep(res) -> int:
    import pandas as pd  # startup: see the imports above

    # startup, as pandas: these modules import pandas and numpy
    from .config.tracks import candidates
    from .studies.unseen import nested_unseen
    from .tracking.summary import (
        combined_markdown,
        combined_summary,
        summary_markdown,
        track_summary,
    )

    t = res.table
    done = int((t.status == "done").sum()) if not t.empty else 0
    reused = int((t.status == "reused").sum()) if not t.empty else 0
    print(
        f"\nsweep summary: {done} configurations run, {reused} reused from earlier runs, {res.n_failed} failed"
    )
    protocol = res.selection_metric.split(".", 1)[0]  # the selection split: val, loso or cv
    for track, metric in res.selection_metrics.items():
        if t.empty or metric not in t or "track" not in t:
            continue
        # the selection split only: test numbers are printed for each track's choice, below
        cols = [c for c in ["label", "track", metric] if c in t]
        top = (
            t[(t.status != "failed") & t.track.isin(candidates(track))]
            .sort_values(metric, ascending=False)
            .head(5)
        )
        if top.empty:
            continue
        print(f"\n{track} track, best 5 on {metric} (the selection split):")
        with pd.option_context("display.width", 200, "display.max_colwidth", 80):
            print(top[cols].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    targets = list(getattr(res, "best_run_ids_by_target", {}))
    if len(targets) > 1:  # several targets: each one's choice, then their mean
        nested = res.unseen_selection == "nested"  # each target's own nested choices
        summaries = {
            target: track_summary(
                part := t[t["target"] == target],
                protocol,
                res.unseen_selection,
                nested_unseen(part, protocol, per_feature_set=False) if nested else None,
            )
            for target in targets
        }
        for target, summary in summaries.items():
            print(f"\ntarget {target}:\n\n{summary_markdown(summary)}")
        print(combined_markdown(targets, combined_summary(summaries)))
    elif not (summary := track_summary(t, protocol, res.unseen_selection, res.nested_unseen)).empty:
        print()
        print(summary_markdown(summary))
    if getattr(res, "study_name", ""):
        print(f"optuna study {res.study_name} in {res.storage}: {len(res.trials)} trials")
    per_track = ", ".join(f"{k} {v}" for k, v in res.best_run_ids.items()) or "none"
    print(
        f"parent run {res.parent_run_id} (experiment {res.experiment_id}); best child {res.best_run_id} "
        f"(per track: {per_track})"
    )
    for label, err in res.failed:
        print(f"  FAILED {label}: {err}", file=sys.stderr)
    return EXIT_FAILED if res.n_failed else EXIT_OK


def add_sweep(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        cmd_sweep,
        help="run the config's grid (or its Optuna search) on a feature store, log every configuration to MLflow",
    )
    add_config_options(p)
    _store_and_tracking(p)


def cmd_sweep(args: argparse.Namespace) -> int:
    from .studies.sweep import run_sweep  # startup: see the imports above

    _check_store(args.store)
    try:
        res = run_sweep(
            args.cfg,
            store=args.store,
            executor=args.executor,
            scheduler=args.scheduler,
            tracking_uri=args.tracking_uri,
            jobs=args.jobs,
            resume=args.resume,
        )
    except user_errors() as e:
        raise UsageError(str(e)) from e
    return _print_sweep(res)


def user_errors() -> tuple[type[Exception], ...]:
    """Errors of a sweep that are the user's to fix: the store lacks channels or labels, no Dask
    scheduler answers, Dask workers run other code than this process."""
    from .data.dataset import DatasetError  # startup: see the imports above
    from .executors.dask import WorkerCodeMismatch

    return (DatasetError, ConnectionError, WorkerCodeMismatch)


def add_ablate(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        cmd_ablate,
        help="speaker / listener / both table -> reports/ablation.{md,csv,png}",
    )
    add_config_options(p, default="ablation")
    _store_and_tracking(p)
    p.add_argument(
        "--out",
        default="reports",
        help="folder for ablation.md, .csv, .png, ablation_comparisons.csv, ablation_unseen.csv "
        "(default: reports/)",
    )


def cmd_ablate(args: argparse.Namespace) -> int:
    from .studies.ablation import ablate  # startup: see the imports above

    _check_store(args.store)
    try:
        df, res = ablate(
            args.cfg,
            store=args.store,
            tracking_uri=args.tracking_uri,
            jobs=args.jobs,
            out_dir=args.out,
            executor=args.executor,
            scheduler=args.scheduler,
            resume=args.resume,
        )
    except user_errors() as e:
        raise UsageError(str(e)) from e
    code = _print_sweep(res)
    print()
    print((Path(args.out) / "ablation.md").read_text())
    names = ["ablation.md", "ablation.csv", "ablation_comparisons.csv", "ablation_unseen.csv"]
    written = [
        Path(args.out) / n for n in [*names, "ablation.png"] if (Path(args.out) / n).exists()
    ]
    print(f"written: {', '.join(map(str, written))} (docs/outputs.md says what each holds)")
    return code


def add_export(sub: argparse._SubParsersAction) -> None:
    p = add_verb(sub, cmd_export, help="write a run's predictions in challenge format")
    p.add_argument(
        "run_id",
        help="MLflow run id of one configuration (a child run; the UI and the sweep print them)",
    )
    p.add_argument(
        "--split",
        choices=["val", "test", "loso", "test_unseen"],
        required=True,
        help="which predictions (test_unseen: listeners left out of training, generalized track)",
    )
    p.add_argument("--out", required=True, help="folder for Subject_<L>_Story_<S>.csv files")
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: mlruns/)")


def cmd_export(args: argparse.Namespace) -> int:
    from .tracking.tracker import export_predictions  # startup: see the imports above

    try:
        files = export_predictions(args.run_id, args.split, args.out, args.tracking_uri)
    except FileNotFoundError as e:
        print(f"experiments export: {e}", file=sys.stderr)
        return EXIT_FAILED
    print(f"{len(files)} prediction files written to {args.out}")
    return EXIT_OK


# --------------------------------------------------------------------- explain
def add_explain(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        cmd_explain,
        help="permutation importance of a run's channels and columns -> reports/importance_<set>_<track>.{csv,png}",
    )
    p.add_argument("run_id", metavar="RUN_ID", help="a configuration's child run")
    p.add_argument("--store", default="features", help="feature store folder (default: features/)")
    p.add_argument("--tracking-uri", default=None, help="MLflow tracking URI (default: mlruns/)")
    p.add_argument(
        "--levels",
        nargs="+",
        choices=["channel", "column", "stat"],
        default=["channel", "column"],
        help="feature groups to permute: a role/channel, one column, one window statistic "
        "(default: channel column)",
    )
    p.add_argument("--repeats", type=int, default=5, help="random lags per session (default: 5)")
    p.add_argument("--split", choices=["test", "val"], default="test", help="scored split")
    p.add_argument(
        "--track",
        choices=["personalized", "generalized"],
        default=None,
        help="whose averaging (default: the configuration's own track)",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of the lags (default: 0)")
    p.add_argument(
        "--out", default="reports", help="folder for the importance files (default: reports/)"
    )


def cmd_explain(args: argparse.Namespace) -> int:
    """Refit the run's configuration on the training stories (deterministically, as the sweep
    did), then move each channel's, column's or window statistic's features in time on the test
    split (each session's block circularly shifted by at least 10 s) and report the drop in CCC
    with the track's averaging, mean over --repeats lags, with a 95 % interval over listeners.
    Writes reports/importance_<set>_<track>.{csv,png} and ccc_per_session_<set>_<track>.png and
    logs them to the run. Exit 1 when the run cannot be explained (the message says why)."""
    from .studies.explain import ExplainError, explain_run  # startup: see the imports above

    _check_store(args.store)
    if args.repeats < 1:
        raise UsageError(f"--repeats must be at least 1, got {args.repeats}")
    try:
        e = explain_run(
            args.run_id,
            store=args.store,
            tracking_uri=args.tracking_uri,
            out_dir=args.out,
            levels=args.levels,
            repeats=args.repeats,
            split=args.split,
            track=args.track,
            seed=args.seed,
        )
    except ExplainError as err:
        print(f"experiments explain: {err}", file=sys.stderr)
        return EXIT_FAILED
    except user_errors() as err:
        raise UsageError(str(err)) from err
    print(e.summary())
    return EXIT_OK


# --------------------------------------------------------------------- agreement
def add_agreement(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        cmd_agreement,
        help="CCC between label targets (self vs. observer ratings) -> reports/agreement.{md,csv,png}",
    )
    add_config_options(p, default="ablation")
    _store_option(p)
    p.add_argument(
        "--targets",
        nargs=2,
        metavar=("A", "B"),
        default=None,
        help="compare these two label targets (default: valence_self vs every other target)",
    )
    p.add_argument(
        "--feature-set",
        default=None,
        help="feature set of the cross-target model (default: the config's largest set the sessions have)",
    )
    p.add_argument(
        "--no-cross", action="store_true", help="skip the cross-target table (no model is trained)"
    )
    p.add_argument(
        "--tracking-uri",
        default=None,
        help="MLflow tracking URI (default: the config's tracking.uri)",
    )
    p.add_argument(
        "--out", default="reports", help="folder for agreement.md/.csv/.png (default: reports/)"
    )


def cmd_agreement(args: argparse.Namespace) -> int:
    """Per session and by both protocols, the CCC between the self-rating and each observer rating
    in the store (or the two --targets), plus a cross-target table: the config's first
    non-baseline configuration trained on one target and scored on the other. Logged to MLflow
    (run `agreement` in the config's experiment)."""
    from .data.dataset import DatasetError  # startup: see the imports above
    from .studies.agreement import AgreementError, agreement

    _check_store(args.store)
    try:
        res = agreement(
            args.cfg,
            store=args.store,
            targets=args.targets,
            out_dir=args.out,
            tracking_uri=args.tracking_uri,
            feature_set=args.feature_set,
            cross=not args.no_cross,
        )
    except AgreementError as e:  # a target the store lacks: nothing to compare
        print(f"experiments agreement: {e}", file=sys.stderr)
        return EXIT_FAILED
    except DatasetError as e:  # the cross-target feature set needs channels the store lacks
        raise UsageError(str(e)) from e
    print(res.files[1].read_text())
    print(f"written: {', '.join(str(f) for f in res.files)}; MLflow run {res.run_id}")
    return EXIT_OK


# --------------------------------------------------------------------- entry point
#: one ``add_<verb>`` per verb; a new verb is one function pair and one entry here
VERBS: list[Callable[[argparse._SubParsersAction], None]] = [
    add_sweep,
    add_ablate,
    add_export,
    add_explain,
    add_score,
    add_agreement,
    add_sessions,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="experiments",
        description="Sweep, score and export empathy-prediction experiments on a feature store.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    sub.required = True
    for add in VERBS:
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``experiments VERB ...``; returns the exit code (0 ok, 1 failures, 2 usage error)."""
    terminate_as_interrupt()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse: --help / --version exit 0, usage errors exit 2
        return int(e.code or 0)
    try:
        if getattr(args, "takes_config", False):
            with warnings.catch_warnings(record=True) as notes:
                warnings.simplefilter("always", ConfigWarning)
                args.cfg = config_from_args(args)
            for note in notes:
                print(f"experiments {args.verb}: note: {note.message}", file=sys.stderr)
            if args.print_config:
                print(args.cfg.to_yaml(), end="")
                return EXIT_OK
        return int(args.func(args))
    except (ConfigError, UsageError) as e:
        print(f"experiments {args.verb}: {e}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print(f"experiments {args.verb}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
