"""The ``experiments save`` and ``predict`` verbs (:mod:`.saved`), entries of
:data:`experiments.cli.VERBS`; they import only ``argparse`` until they run (a quick ``--help``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from featurestore.commands import DEFAULT_STORE, opt
from featurestore.errors import UsageError

#: save and predict: go on (with a warning) when the store differs from the model's
ALLOW_MISMATCH = opt(
    "--allow-mismatch",
    action="store_true",
    help="go on with a warning when the store differs from what the model was trained on "
    "(other extractor versions, another frame rate, another store's fingerprint)",
)
SAVE_ARGUMENTS = (
    opt("run_id", metavar="RUN_ID", help="a configuration's child run"),
    opt(
        "--register",
        default=None,
        metavar="NAME",
        help="also register it as a new version of model NAME, with the alias `chosen`",
    ),
    ALLOW_MISMATCH,
)
PREDICT_ARGUMENTS = (
    opt(
        "model",
        metavar="MODEL",
        help="models:/<name>@<alias> (the sweep registers <experiment>-<track>@chosen), "
        "runs:/<run id>/model, or a run id",
    ),
    opt("--out", default=None, metavar="DIR", help="folder for the <session>.csv files"),
    opt("--sessions", nargs="+", default=None, help="only these sessions of the store"),
    opt(
        "--stream",
        action="store_true",
        help="read frame table rows (CSV with a header) from stdin, write each frame's "
        "prediction to stdout as soon as it is known",
    ),
    ALLOW_MISMATCH,
)


def cmd_save(args: argparse.Namespace) -> int:
    """Refit a configuration's child run on the store exactly as its sweep fitted it and log it into
    the run as an MLflow model (pyfunc: a session's frame table -> its per-frame predictions);
    with --register, also a new version of that registered model with the alias `chosen`."""
    # startup: scikit-learn, MLflow and the models load when the verb runs, not for --help
    from ..trained.model import ModelError
    from .saved import save_run

    try:
        saved = save_run(
            args.run_id,
            args.store or DEFAULT_STORE,
            args.tracking_uri,
            args.register or "",
            args.allow_mismatch,
        )
    except ModelError as e:
        raise UsageError(str(e)) from e
    print(saved_text(saved))
    return 0


def saved_text(saved: Any) -> str:
    where = (
        f"registered as {saved.name} version {saved.version} ({saved.uri})"
        if saved.name
        else saved.uri
    )
    if saved.reused:
        done = f"logged before ({saved.size_bytes / 1e6:.2f} MB)"
    else:
        done = (
            f"fitted in {saved.fit_seconds:.1f} s, logged in {saved.log_seconds:.1f} s "
            f"({saved.size_bytes / 1e6:.2f} MB)"
        )
    return f"{saved.track} model of run {saved.run_id}: {done}; {where}"


def cmd_predict(args: argparse.Namespace) -> int:
    """Predict every session of a store (labelled or not) with a saved model: one CSV per session
    (the store's session names, the header the target's name, one row per label frame). With
    --stream, read one frame table row at a time from standard input (CSV with a header) and write
    each frame's prediction as soon as it is known (causal models only)."""
    # startup: as cmd_save's
    from ..trained.model import ModelError
    from ..trained.stream import stream_csv
    from .saved import predict_store

    try:
        if args.stream:
            return stream_csv(args.model, args.tracking_uri, sys.stdin, sys.stdout)
        if args.out is None:
            raise UsageError("experiments predict: give --out DIR for the prediction files")
        files = predict_store(
            args.model,
            args.store or DEFAULT_STORE,
            args.out,
            args.tracking_uri,
            args.sessions,
            args.allow_mismatch,
        )
    except ModelError as e:
        raise UsageError(str(e)) from e
    print(f"{len(files)} prediction files written to {args.out}")
    return 0


def save_sweep_choices(args: argparse.Namespace, res: Any, store: str) -> None:
    """``experiments sweep``'s last step: each target's and track's choice saved and registered
    (:func:`~experiments.studies.saved.save_choices`), printed."""
    from .saved import save_choices  # startup: as cmd_save's

    uri = args.tracking_uri or args.cfg.tracking.uri
    by_target = res.best_run_ids_by_target or {args.cfg.target: res.best_run_ids}
    for saved in save_choices(by_target, store, uri, args.cfg.tracking.experiment):
        print(saved_text(saved))
