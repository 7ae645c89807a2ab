"""``experiments`` command line: each verb of :data:`VERBS` is a ``cmd_<verb>(args) -> int`` whose docstring is its
``--help`` description; a verb with a config gets it loaded into ``args.cfg`` by :func:`main`. Exit codes: 0 all good,
1 some sessions or configurations failed, 2 usage error."""

from __future__ import annotations

import argparse
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from featurestore import Store, __version__
from featurestore.commands import DEFAULT_STORE, Option, Verb, make_parser, opt, run_verb
from featurestore.errors import ConfigError, UsageError
from featurestore.parallel import backends_help
from featurestore.processes import terminate_as_interrupt

# Each verb imports what it runs when it runs (scikit-learn, XGBoost, MLflow: about 2 s), so that `experiments
# --help` starts at once (tests/test_layout.py still counts these imports); `main` needs the config's errors.
from .config.grid import MAX_CONFIGURATIONS
from .config.loading import load_config
from .config.options import ConfigWarning
from .config.schema import ExperimentConfig
from .tracking.redact import mask_uri

if TYPE_CHECKING:
    from .studies.parent_run import SweepOptions
from .studies.model_cli import (
    PREDICT_ARGUMENTS,
    SAVE_ARGUMENTS,
    cmd_predict,
    cmd_save,
    save_sweep_choices,
)
from .studies.session_cli import CONFIG_ARGUMENT, cmd_sessions
from .studies.sweep_cli import print_sweep

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


#: options several verbs take, by name
SHARED = {
    "store": opt(
        "--store",
        default=None,
        metavar="DIR",
        help="feature store folder (default: features/); a config's target and channels are "
        "checked against it before anything runs",
    ),
    "tracking": opt(
        "--tracking-uri",
        default=None,
        help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else the config's tracking.uri, "
        "else mlruns/ -> sqlite:///mlruns/mlflow.db)",
    ),
    "jobs": opt(
        "--jobs",
        type=int,
        default=None,
        help="configurations evaluated in parallel processes (default: the config's jobs, else 1)",
    ),
    "backend": opt(
        "--backend",
        default=None,
        metavar="NAME",
        help=f"where configurations run: {backends_help()}, or a backend registered by a module "
        "you import; default: the config's backend",
    ),
    "scheduler": opt(
        "--scheduler",
        default=None,
        help="address of an existing cluster's scheduler, for a backend that joins one (dask)",
    ),
    "set": opt(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config entry; dotted KEY, VALUE parsed as YAML; repeatable "
        "(e.g. --set window.delay_s=[2] --set models.2.alpha=[1,10]: list items by index)",
    ),
    "no-resume": opt(
        "--no-resume",
        dest="resume",
        action="store_false",
        help="run every configuration again, even those with a finished run by the same code on "
        "the same store",
    ),
}
#: the shared options of the verbs that sweep
SWEEPING = ("store", "tracking", "jobs", "backend", "scheduler", "no-resume")


def verb(
    run: Callable[[argparse.Namespace], int],
    help: str,
    config: str | None = None,
    shared: tuple[str, ...] = (),
    arguments: tuple[Option, ...] = (),
) -> Verb:
    """A verb: ``run``, its ``help``, the packaged ``config`` it reads without ``--config`` (None: no config;
    else ``--config``, ``--set``, ``--print-config`` and ``--max-configurations``)."""
    configs: tuple[Option, ...] = ()
    if config is not None:
        configs = (
            opt(
                "--config",
                default=None,
                metavar="FILE",
                help="experiment config (YAML), or a packaged name: default, ablation, smoke, search, "
                f"causal (default: {config}, i.e. experiments/configs/{config}.yaml)",
            ),
            SHARED["set"],
            opt(
                "--print-config",
                action="store_true",
                help="print the resolved config and exit (with --store: after checking its target and "
                "channels against the store)",
            ),
            opt(
                "--max-configurations",
                type=int,
                default=MAX_CONFIGURATIONS,
                metavar="N",
                help=f"refuse a grid of more than N configurations (an Optuna search of more than N "
                f"trials), counted before anything runs (default: {MAX_CONFIGURATIONS:,})",
            ),
        )
    options = (*configs, *(SHARED[s] for s in shared), *arguments)
    defaults = {"takes_config": True, "config_default": config} if config is not None else {}
    return Verb(run, help, options, defaults=defaults)


def config_from_args(args: argparse.Namespace) -> ExperimentConfig:
    """The config of ``--config`` and ``--set``, checked against the store unless only ``--print-config`` was asked."""
    store = getattr(args, "store", None)  # a verb without --store reads no store
    if store is None and not args.print_config and hasattr(args, "store"):
        store = args.store = DEFAULT_STORE
    path = args.config or args.config_default
    if args.max_configurations < 1:
        raise UsageError(f"--max-configurations must be at least 1, got {args.max_configurations}")
    names = None
    overrides = list(args.overrides)
    if store is not None:
        from .config.store_check import store_names  # startup: see the imports above

        try:
            names = store_names(store, require_channels=args.verb != "agreement")
        except ConfigError:  # no store to check against: the config's own problems first
            load_config(path, overrides, max_configurations=args.max_configurations)
            raise
        if args.verb == "agreement" and args.config is None:
            from .studies.corpus_config import corpus_overrides  # startup: see the imports above

            overrides = corpus_overrides(names) + overrides  # the store's target, roles, channels
    return load_config(path, overrides, names, args.max_configurations)


def _check_store(store: str | None) -> str:
    """``store`` (default ``features/``), refused unless it is a folder with shards."""
    store = store or DEFAULT_STORE
    build = f"`make features` (or `featurestore extract DATA_DIR --store {store}`)"
    if not Path(store).is_dir():
        raise UsageError(
            f"feature store {store}: no such folder; build it with {build}, or pass its folder with --store"
        )
    if not Store(store).list_sessions():
        raise UsageError(f"no shards in {store}; run {build} first")
    return store


def user_errors() -> tuple[type[Exception], ...]:
    """Errors of a sweep that are the user's to fix (store, Dask scheduler or workers, artifact location)."""
    from .data.dataset import DatasetError  # startup: see the imports above
    from .engine.dask import WorkerCodeMismatch
    from .tracking.tracker import ArtifactLocationError

    return (DatasetError, ConnectionError, WorkerCodeMismatch, ArtifactLocationError)


def cmd_score(args: argparse.Namespace) -> int:
    """Read Subject_<L>_Story_<S>.csv files (header `valence`, one row per frame) from both folders,
    pair them by session, and print the per-session CCC (listeners x stories) and the
    personalized and generalized protocol means, as the official challenge scorer does, then
    both means of every registered metric (Pearson's r, RMSE, MAE). The ground truth may hold
    every split: the stories scored are those with predictions (or --split's), and the sessions
    left out are listed. Exit 1 when the files of the scored stories do not pair up."""
    from .evaluation.score_files import print_scores, score_folders  # startup: see above

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


def cmd_sweep(args: argparse.Namespace) -> int:
    """Run the config's grid, or its Optuna search (search.method: optuna), on a feature store and
    log every configuration to MLflow as a child run of one parent run; print each track's best
    configurations on the selection split and its choice. Exit 1 when a configuration failed."""
    from .studies.search import run_search  # startup: see the imports above
    from .studies.sweep import run_sweep

    store = _check_store(args.store)
    run = run_search if args.cfg.search.method == "optuna" else run_sweep
    try:
        res = run(args.cfg, store, _sweep_options(args))
    except user_errors() as e:
        raise UsageError(str(e)) from e
    code = print_sweep(res)
    if args.save_models:
        save_sweep_choices(args, res, store)
    return code


def _sweep_options(args: argparse.Namespace) -> SweepOptions:
    from .studies.parent_run import SweepOptions  # startup: see the imports above

    return SweepOptions(**_kw(args, "backend", "scheduler", "tracking_uri", "jobs", "resume"))


def _kw(args: argparse.Namespace, *names: str) -> dict[str, Any]:
    return {name: getattr(args, name) for name in names}


def cmd_ablate(args: argparse.Namespace) -> int:
    """Sweep every feature set of the config (default: the packaged ablation config) and write the
    ablation report: each feature set's chosen configuration per track with its validation and test
    CCC, intervals, chance levels and paired comparisons (docs/outputs.md says what each file
    holds). Exit 1 when a configuration failed."""
    from .studies.ablation import ablate  # startup: see the imports above

    store = _check_store(args.store)
    try:
        _, res = ablate(args.cfg, store, args.out, _sweep_options(args))
    except user_errors() as e:
        raise UsageError(str(e)) from e
    code = print_sweep(res)
    out = Path(args.out)
    print(f"\n{(out / 'ablation.md').read_text()}")
    names = ("ablation.md", "ablation.csv", "ablation_comparisons.csv", "ablation_unseen.csv")
    written = [out / n for n in (*names, "ablation.png") if (out / n).exists()]
    print(f"written: {', '.join(map(str, written))} (docs/outputs.md says what each holds)")
    return code


def cmd_export(args: argparse.Namespace) -> int:
    """Write a configuration's predictions of one split as challenge-format CSV files
    (Subject_<L>_Story_<S>.csv, header `valence`, one row per label frame), as `experiments score`
    reads them. Exit 1 when the run has none for the split."""
    from .tracking.tracker import export_predictions  # startup: see the imports above

    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise UsageError(f"--out {args.out} is a file: give a folder for the prediction files")
    try:
        files = export_predictions(args.run_id, args.split, args.out, args.tracking_uri)
    except FileNotFoundError as e:
        print(f"experiments export: {e}", file=sys.stderr)
        return EXIT_FAILED
    print(f"{len(files)} prediction files written to {args.out}")
    return EXIT_OK


def cmd_explain(args: argparse.Namespace) -> int:
    """Refit the run's configuration on the training stories (deterministically, as the sweep
    did), then move each channel's, column's or window statistic's features in time on the test
    split (each session's block circularly shifted by at least 10 s) and report the drop in CCC
    with the track's averaging, mean over --repeats lags, with a 95 % interval over listeners.
    Writes reports/importance_<set>_<track>.{csv,png} and ccc_per_session_<set>_<track>.png and
    logs them to the run. Exit 1 when the run cannot be explained (the message says why)."""
    from .studies.explain import ExplainError, explain_run  # startup: see the imports above

    store = _check_store(args.store)
    if args.repeats < 1:
        raise UsageError(f"--repeats must be at least 1, got {args.repeats}")
    try:
        options = _kw(
            args, "tracking_uri", "levels", "repeats", "split", "track", "seed", "new_run"
        )
        e = explain_run(args.run_id, store=store, out_dir=args.out, **options)
    except ExplainError as err:
        print(f"experiments explain: {err}", file=sys.stderr)
        return EXIT_FAILED
    except user_errors() as err:
        raise UsageError(str(err)) from err
    print(e.summary())
    return EXIT_OK


def cmd_agreement(args: argparse.Namespace) -> int:
    """Per session and by both protocols, the CCC between the self-rating and each observer rating
    in the store (or the two --targets), plus a cross-target table: the config's first
    non-baseline configuration trained on one target and scored on the other. Logged to MLflow
    (run `agreement` in the config's experiment)."""
    from .data.dataset import DatasetError  # startup: see the imports above
    from .studies.agreement import AgreementError, agreement

    store = _check_store(args.store)
    try:
        options = _kw(args, "targets", "tracking_uri", "feature_set")
        res = agreement(args.cfg, store=store, out_dir=args.out, cross=not args.no_cross, **options)
    except AgreementError as e:  # a target the store lacks: nothing to compare
        print(f"experiments agreement: {e}", file=sys.stderr)
        return EXIT_FAILED
    except DatasetError as e:  # the cross-target feature set needs channels the store lacks
        raise UsageError(str(e)) from e
    print(next(f for f in res.files if f.name == "agreement.md").read_text())
    print(f"written: {', '.join(str(f) for f in res.files)}; MLflow run {res.run_id}")
    return EXIT_OK


def _out(files: str) -> Option:
    return opt("--out", default="reports", help=f"folder for {files} (default: reports/)")


#: the verbs, in ``--help``'s order (a verb is one ``cmd_<verb>`` and one entry here)
VERBS: list[Verb] = [
    verb(
        cmd_sweep,
        "run the config's grid (or its Optuna search) on a feature store, log every configuration to MLflow",
        config="default",
        shared=SWEEPING,
        arguments=(
            opt(
                "--no-models",
                dest="save_models",
                action="store_false",
                help="do not log and register each track's chosen configuration as an MLflow model",
            ),
        ),
    ),
    verb(
        cmd_ablate,
        "speaker / listener / both table -> reports/ablation.{md,csv,png}",
        config="ablation",
        shared=SWEEPING,
        arguments=(_out("ablation.md, .csv, .png, ablation_comparisons.csv, ablation_unseen.csv"),),
    ),
    verb(
        cmd_export,
        "write a run's predictions in challenge format",
        shared=("tracking",),
        arguments=(
            opt(
                "run_id",
                help="MLflow run id of one configuration (a child run; the UI and the sweep print them)",
            ),
            opt(
                "--split",
                choices=["val", "test", "loso", "test_unseen"],
                required=True,
                help="which predictions (test_unseen: listeners left out of training, generalized track)",
            ),
            opt("--out", required=True, help="folder for Subject_<L>_Story_<S>.csv files"),
        ),
    ),
    verb(
        cmd_save,
        "log a run's configuration as an MLflow model (refitted as its sweep fitted it)",
        shared=("store", "tracking"),
        arguments=SAVE_ARGUMENTS,
    ),
    verb(
        cmd_predict,
        "predict a store's sessions (or frames from stdin, --stream) with a saved model",
        shared=("store", "tracking"),
        arguments=PREDICT_ARGUMENTS,
    ),
    verb(
        cmd_explain,
        "permutation importance of a run's channels and columns -> reports/importance_<set>_<track>.{csv,png}",
        shared=("store", "tracking"),
        arguments=(
            opt("run_id", metavar="RUN_ID", help="a configuration's child run"),
            opt(
                "--levels",
                nargs="+",
                choices=["channel", "column", "stat"],
                default=["channel", "column"],
                help="feature groups to permute: a role/channel, one column, one window statistic "
                "(default: channel column)",
            ),
            opt("--repeats", type=int, default=5, help="random lags per session (default: 5)"),
            opt("--split", choices=["test", "val"], default="test", help="scored split"),
            opt(
                "--track",
                choices=["personalized", "generalized"],
                default=None,
                help="whose averaging (default: the configuration's own track)",
            ),
            opt("--seed", type=int, default=0, help="seed of the lags (default: 0)"),
            opt(
                "--new-run",
                action="store_true",
                help="log into a new run of the experiment, never the original (needed when the "
                "store differs from the run's)",
            ),
            _out("the importance files"),
        ),
    ),
    verb(
        cmd_score,
        "score challenge-format predictions against ground truth (both protocols)",
        arguments=(
            opt(
                "ground_truth_dir",
                type=Path,
                metavar="GROUND_TRUTH_DIR",
                help="folder of the true Subject_<L>_Story_<S>.csv ratings (may hold every split)",
            ),
            opt(
                "prediction_dir",
                type=Path,
                metavar="PREDICTION_DIR",
                help="folder of predicted Subject_<L>_Story_<S>.csv files (experiments export writes them)",
            ),
            opt(
                "--csv",
                type=Path,
                default=None,
                metavar="FILE",
                help="also write session, listener, story, ccc to FILE",
            ),
            opt(
                "--split",
                choices=["train", "val", "test"],
                default=None,
                help="score the stories of this official split (test: 3, 6, 7); default: the stories "
                "that have predictions. Either way every listener of a scored story needs a prediction",
            ),
        ),
    ),
    verb(
        cmd_agreement,
        "CCC between label targets (self vs. observer ratings) -> reports/agreement.{md,csv,png}",
        config="ablation",
        shared=("store", "tracking"),
        arguments=(
            opt(
                "--targets",
                nargs=2,
                metavar=("A", "B"),
                default=None,
                help="compare these two label targets (default: valence_self vs every other target)",
            ),
            opt(
                "--feature-set",
                default=None,
                help="feature set of the cross-target model (default: the config's largest set the "
                "sessions have)",
            ),
            opt(
                "--no-cross",
                action="store_true",
                help="skip the cross-target table (no model is trained)",
            ),
            _out("agreement.md/.csv/.png"),
        ),
    ),
    verb(
        cmd_sessions,
        "whole-session ratings: models over session summaries, CV by person -> MLflow, "
        "reports/summary_sessions.{md,csv}",
        shared=("store", "tracking", "set", "no-resume"),
        arguments=(CONFIG_ARGUMENT, _out("summary_sessions.md/.csv")),
    ),
]


def build_parser() -> argparse.ArgumentParser:
    description = "Sweep, score and export empathy-prediction experiments on a feature store."
    return make_parser("experiments", description, __version__, VERBS)


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``experiments VERB ...``; returns the exit code (130 Ctrl-C, 143 SIGTERM)."""
    terminate_as_interrupt()
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as e:  # argparse: --help / --version exit 0, usage errors exit 2
        return int(e.code or 0)

    def run() -> int:
        env_tracking_uri(args)
        if getattr(args, "takes_config", False):
            with warnings.catch_warnings(record=True) as notes:
                warnings.simplefilter("always", ConfigWarning)
                args.cfg = config_from_args(args)
            for note in notes:
                print(f"experiments {args.verb}: note: {note.message}", file=sys.stderr)
            if args.print_config:
                print(mask_uri(args.cfg.to_yaml()), end="")
                return EXIT_OK
        return int(args.func(args))

    interrupted = f"experiments {args.verb}: {{what}}; the configurations finished are logged, a re-run resumes"
    return run_verb(run, f"experiments {args.verb}", interrupted)


def env_tracking_uri(args: argparse.Namespace) -> None:
    """``MLFLOW_TRACKING_URI`` as ``--tracking-uri`` when the verb takes one and it is not given
    (the flag wins over the environment, the environment over the config's ``tracking.uri``)."""
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env and hasattr(args, "tracking_uri") and args.tracking_uri is None:
        args.tracking_uri = env
        print(
            f"experiments {args.verb}: note: tracking to MLFLOW_TRACKING_URI={mask_uri(env)} (of the "
            "environment; --tracking-uri overrides it)",
            file=sys.stderr,
        )


if __name__ == "__main__":
    sys.exit(main())
