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
from collections.abc import Callable, Sequence
from pathlib import Path

from featurestore import Store, __version__
from featurestore.processes import terminate_as_interrupt
from featurestore.storage.store import parse_session, session_name

# Each verb imports what it runs when it runs (the training verbs: scikit-learn, XGBoost, MLflow,
# about 2 s), so that `experiments --help` starts at once; tests/test_layout.py still counts these
# imports when it looks for cycles. `main` needs the config's errors whatever the verb.
from .config.loading import ConfigError, load_config

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


def add_config_options(p: argparse.ArgumentParser) -> None:
    """``--config FILE``, repeatable ``--set KEY=VALUE`` and ``--print-config``."""
    p.add_argument(
        "--config",
        default=None,
        metavar="FILE",
        help="experiment config (YAML), or a packaged name: default, ablation, smoke, search "
        "(default: experiments/configs/default.yaml)",
    )
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config entry; dotted KEY, VALUE parsed as YAML; repeatable "
        "(e.g. --set window.delay_s=[2] --set models.0.alpha=[1,10])",
    )
    p.add_argument("--print-config", action="store_true", help="print the resolved config and exit")
    p.set_defaults(takes_config=True)


def config_from_args(args: argparse.Namespace):
    """The :class:`~experiments.config.schema.ExperimentConfig` named by ``--config`` and ``--set``."""
    return load_config(
        args.config or getattr(args, "config_default", None), overrides=args.overrides
    )


# --------------------------------------------------------------------- score
def add_score(sub: argparse._SubParsersAction) -> None:
    p = add_verb(
        sub,
        cmd_score,
        help="score challenge-format predictions against ground truth (both protocols)",
    )
    p.add_argument("ground_truth_dir", type=Path, metavar="GROUND_TRUTH_DIR")
    p.add_argument("prediction_dir", type=Path, metavar="PREDICTION_DIR")
    p.add_argument(
        "--csv",
        type=Path,
        default=None,
        metavar="FILE",
        help="also write session, listener, story, ccc to FILE",
    )


def _session_csvs(folder: Path) -> tuple[dict[tuple[int, int], Path], list[str]]:
    """(listener, story) -> CSV path; plus problems (duplicate sessions)."""
    if not folder.is_dir():
        raise UsageError(
            f"{folder} is not a folder; pass the folder holding Subject_<L>_Story_<S>.csv files"
        )
    found: dict[tuple[int, int], Path] = {}
    problems: list[str] = []
    for path in sorted(folder.iterdir()):
        if path.suffix.lower() != ".csv" or path.name.startswith("."):
            continue
        ls = parse_session(path.stem)
        if ls is None:
            continue
        if ls in found:
            problems.append(
                f"{folder}: two files for {session_name(*ls)}: {found[ls].name} and {path.name}; keep one"
            )
            continue
        found[ls] = path
    return found, problems


def _read_valence(path: Path):
    """Values of one challenge-format CSV (validated by featurestore's annotation reader).

    The reader returns float32, the official scorer float64: CCCs agree to about 1e-8.
    """
    # predictions may leave [-1, 1]; the official scorer does not check the range either
    from featurestore.sources.annotations import read_annotation  # startup: see the imports above

    return read_annotation(path, value_range=(-float("inf"), float("inf")))


def cmd_score(args: argparse.Namespace) -> int:
    """Read Subject_<L>_Story_<S>.csv files (header `valence`, one row per frame) from both folders,
    pair them by session, and print the per-session CCC (listeners x stories) and the
    personalized and generalized protocol means, as the official challenge scorer does.
    Exit 1 when the files do not pair up."""
    import pandas as pd  # startup: see the imports above

    from .evaluation.metrics import ccc, ccc_matrix, ccc_per_listener, ccc_per_story, ccc_protocols

    truth, problems = _session_csvs(args.ground_truth_dir)
    preds, more = _session_csvs(args.prediction_dir)
    problems += more
    if not truth:
        print(f"no Subject_<L>_Story_<S>.csv files in {args.ground_truth_dir}", file=sys.stderr)
        return EXIT_FAILED
    missing = sorted(set(truth) - set(preds))
    extra = sorted(set(preds) - set(truth))
    if missing:
        problems.append(
            f"{len(missing)} predictions missing from {args.prediction_dir}: "
            + ", ".join(f"{session_name(*k)}.csv" for k in missing)
        )
    if extra:
        problems.append(
            f"{len(extra)} predictions in {args.prediction_dir} have no ground truth in {args.ground_truth_dir}: "
            + ", ".join(preds[k].name for k in extra)
        )
    rows = []
    for key in sorted(set(truth) & set(preds)):
        name = session_name(*key)
        try:
            y_true, y_pred = _read_valence(truth[key]), _read_valence(preds[key])
        except ValueError as e:
            problems.append(str(e))
            continue
        if len(y_true) != len(y_pred):
            problems.append(
                f"{name}: ground truth has {len(y_true)} frames ({truth[key]}) but the prediction has "
                f"{len(y_pred)} ({preds[key]}); write one row per label frame"
            )
            continue
        rows.append(
            {"session": name, "listener": key[0], "story": key[1], "ccc": ccc(y_true, y_pred)}
        )
    if problems:
        print(f"cannot score: {len(problems)} problem(s)", file=sys.stderr)
        for msg in problems:
            print(f"  {msg}", file=sys.stderr)
        return EXIT_FAILED

    table = pd.DataFrame(rows)
    matrix = ccc_matrix(table)
    shown = matrix.copy()
    shown["mean"] = ccc_per_listener(table)
    shown.loc["mean"] = list(ccc_per_story(table).reindex(matrix.columns)) + [float("nan")]
    shown.columns = pd.Index([str(c) for c in shown.columns], name="story")
    protocols = ccc_protocols(table)
    print(f"CCC per session: {len(table)} sessions (rows: listener, columns: story)")
    print(shown.to_string(float_format=lambda v: f"{v:.4f}", na_rep=""))
    print()
    print(
        f"personalized  {protocols['personalized']:.4f}   mean over listeners of each listener's mean over stories"
    )
    print(
        f"generalized   {protocols['generalized']:.4f}   mean over stories of each story's mean over listeners"
    )
    if args.csv is not None:
        args.csv.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.csv, index=False)
        print(f"per-session CCC written to {args.csv}")
    return EXIT_OK


# --------------------------------------------------------------------- sweep / ablate / export
def _store_and_tracking(p: argparse.ArgumentParser) -> None:
    p.add_argument("--store", default="features", help="feature store folder (default: features/)")
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
        "--executor", choices=["local", "dask"], default="local", help="where configurations run"
    )
    p.add_argument(
        "--scheduler",
        default=None,
        help="address of an existing Dask scheduler (with --executor dask)",
    )
    p.add_argument(
        "--no-resume",
        "--rerun",
        dest="resume",
        action="store_false",
        help="run every configuration again, even those with a finished run by the same code on the same store",
    )


def _check_store(store: str) -> None:
    if not Store(store).list_sessions():
        raise UsageError(
            f"no shards in {store}; run `make features` (or `featurestore extract DATA_DIR --store {store}`) first"
        )


def _print_sweep(res) -> int:
    import pandas as pd  # startup: see the imports above

    from .config.tracks import candidates
    from .tracking.summary import summary_markdown, track_summary

    t = res.table
    done = int((t.status == "done").sum()) if not t.empty else 0
    reused = int((t.status == "reused").sum()) if not t.empty else 0
    print(
        f"\nsweep summary: {done} configurations run, {reused} reused from earlier runs, {res.n_failed} failed"
    )
    protocol = "loso" if res.selection_metric.startswith("loso.") else "val"
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
    summary = track_summary(t, protocol)
    if not summary.empty:
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
    from .studies.distributed import run_sweep_dask  # startup: see the imports above
    from .studies.search import run_search
    from .studies.sweep import SweepResult, run_sweep

    _check_store(args.store)
    run: Callable[..., SweepResult]
    if args.cfg.search.method == "optuna":
        if args.executor == "dask":
            raise UsageError(
                "an Optuna search (search.method: optuna) runs its trials with the local executor: "
                "use --executor local --jobs N"
            )
        run = run_search
    elif args.executor == "dask":
        run = run_sweep_dask
    else:
        run = run_sweep
    kw = {"scheduler": args.scheduler} if args.executor == "dask" else {}
    try:
        res = run(
            args.cfg,
            store=args.store,
            tracking_uri=args.tracking_uri,
            jobs=args.jobs,
            resume=args.resume,
            **kw,
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
        config_default="ablation",
    )
    add_config_options(p)
    _store_and_tracking(p)
    p.add_argument(
        "--out", default="reports", help="folder for ablation.md/.csv/.png (default: reports/)"
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
    print(
        f"written: {Path(args.out) / 'ablation.md'}, {Path(args.out) / 'ablation.csv'}, "
        f"{Path(args.out) / 'ablation.png'}"
    )
    return code


def add_export(sub: argparse._SubParsersAction) -> None:
    p = add_verb(sub, cmd_export, help="write a run's predictions in challenge format")
    p.add_argument("run_id")
    p.add_argument(
        "--split",
        choices=["val", "test", "loso", "val_unseen", "test_unseen"],
        required=True,
        help="which predictions (*_unseen: listeners left out of training, generalized track)",
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
    with the track's averaging, mean over --repeats lags, with a 95 % t interval over listeners.
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
        config_default="ablation",
    )
    add_config_options(p)
    p.add_argument("--store", default="features", help="feature store folder (default: features/)")
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
            args.cfg = config_from_args(args)
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
