"""``featurestore`` command line: scan, extract, import, labels, ratings, transcripts, ls, inspect, verify, demo.

Exit codes: 0 all good, 1 some sessions failed (a summary says which and why), 2 usage error.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import __version__
from .commands import DEFAULT_STORE, Option, Verb, make_parser, opt, run_verb
from .errors import FeaturestoreError, UsageError
from .extraction.config import (
    FeatureConfig,
    check_channels,
    check_overrides_apply,
    load_feature_config,
)
from .extraction.derived import RULE_VERSIONS
from .extraction.extract import SessionResult
from .extraction.imports import import_labels, import_tables, import_transcripts
from .extraction.many import extract_many
from .extraction.recordings import some
from .extraction.summary import (
    print_extract_summary,
    print_import,
    print_session,
    scan_table,
    store_table,
)
from .extractors import channels_of_kind, registry
from .parallel import backends_help
from .processes import EXIT_USAGE, interrupt_exit_code, parse_args
from .sources.label_checks import apply_declarations
from .sources.manifest import (
    ScanReport,
    SessionFiles,
    check_labels,
    read_scan_json,
    scan,
    write_manifest,
)
from .sources.manifest_file import ManifestError
from .storage.store import Store, parse_session, session_name

EXIT_OK, EXIT_FAILED = 0, 1
MANIFEST = "manifest.json"


def _load_cfg(args: argparse.Namespace) -> FeatureConfig:
    cfg = load_feature_config(
        getattr(args, "config", None),
        getattr(args, "data_dir", None),
        overrides=getattr(args, "set", None) or (),
    )
    if getattr(args, "face_fps", None):
        cfg.face_fps = args.face_fps
    if getattr(args, "split_x", None):
        cfg.split_x = args.split_x
    return cfg


def _scan(args: argparse.Namespace, cfg: FeatureConfig) -> ScanReport:
    """Sessions of ``--manifest``, else of the config's ``manifest`` (inside the config's folder
    unless --allow-outside-paths), else found in ``data_dir``, with the rating scales and
    coverage the config (``--config``, else featurestore.yaml) declares."""
    data_dir, allow = args.data_dir, args.allow_outside_paths
    manifest = args.manifest or cfg.manifest
    if manifest is None and data_dir is None:
        raise UsageError("give a DATA_DIR, or a manifest with --manifest FILE")
    # the config's manifest (symbolic links and `..` resolved) inside the config's folder
    folder = Path(args.config).parent if getattr(args, "config", None) else Path(data_dir or ".")
    if not args.manifest and cfg.manifest and not allow:
        if not Path(cfg.manifest).resolve().is_relative_to(folder.resolve()):
            raise UsageError(
                f"the config's manifest {Path(cfg.manifest)} is outside the config's folder {folder}; "
                "move it there, or pass --allow-outside-paths to read files elsewhere"
            )
    try:
        report = scan(
            Path(data_dir) if data_dir else None, cfg.story_speaker, cfg.splits, manifest, allow
        )
        where = getattr(args, "config", None) or "featurestore.yaml"
        apply_declarations(report.sessions, cfg.targets, cfg.min_coverage, where)
    except (ManifestError, ValueError) as e:
        raise UsageError(str(e)) from e
    return report


def cmd_scan(args: argparse.Namespace) -> int:
    cfg = _load_cfg(args)
    report = _scan(args, cfg)
    check_labels(report)
    where = args.manifest or cfg.manifest or args.data_dir
    scan_table(report.sessions, str(where))
    for issue in report.issues:
        print(f"  {issue}", file=sys.stderr)
    print(f"manifest written to {write_manifest(report, Path(args.store) / MANIFEST)}")
    if not report.sessions:
        print(f"no Subject_<L>_Story_<S> files found under {args.data_dir}", file=sys.stderr)
        return EXIT_FAILED
    serious = [i for i in report.issues if i.kind in ("duplicate", "unparsable", "invalid")]
    return EXIT_FAILED if serious else EXIT_OK


def _sessions_for_extract(
    args: argparse.Namespace, cfg: FeatureConfig
) -> tuple[list[SessionFiles], dict[str, list[Path]]]:
    """The sessions to extract (``--sessions`` only, when given) and the extra files of each."""
    if args.data_dir or args.manifest or cfg.manifest:
        report = _scan(args, cfg)
        sessions, dups = report.sessions, report.duplicates()
    else:
        manifest = Path(args.store) / MANIFEST
        if not manifest.exists():
            raise UsageError(
                f"no DATA_DIR given and no {manifest}; run `featurestore scan DATA_DIR --store {args.store}` first"
            )
        sessions, dups = read_scan_json(manifest)
    if args.sessions:
        sessions = [s for s in sessions if s.session in set(args.sessions)]
    return sessions, dups


def _split_todo(
    sessions: list[SessionFiles], dups: dict[str, list[Path]]
) -> tuple[list[SessionFiles], list[SessionResult]]:
    """(sessions with a video to extract, failures of sessions with several files)."""
    todo, failed = [], []
    for s in sessions:
        if s.session in dups:
            files = ", ".join(str(p) for p in [s.video, *dups[s.session]] if p)
            error = f"several files for one session ({files}); keep one and re-run"
            failed.append(SessionResult(s.session, status="failed", error=error))
        elif s.video is not None or any(k.startswith("video_") for k in s.media):
            todo.append(s)
    return todo, failed


def _stop_when_disk_full(result: SessionResult) -> None:
    """End the extraction at the first session that failed for want of disk space (one message:
    every later session would fail the same way)."""
    if result.disk_full:
        raise FeaturestoreError(
            f"{result.session}: {result.error}; extraction stopped at this session (the sessions "
            "stored before it are intact; the re-run does only what is missing)"
        )


def cmd_extract(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    cfg = _load_cfg(args)
    channels = args.channels or cfg.channels
    check_channels(channels, "--channels")
    check_overrides_apply(args.set, channels, "extract")
    todo, pre_failed = _split_todo(*_sessions_for_extract(args, cfg))
    if not todo and not pre_failed:
        print("nothing to extract: no sessions with a video", file=sys.stderr)
        return EXIT_FAILED
    print(
        f"extracting {', '.join(channels)} for {len(todo)} sessions into {args.store} "
        f"(jobs={args.jobs}, face rate {cfg.face_fps:g} fps)"
    )
    if settings := cfg.settings_line(channels):
        print(f"extractor settings (not the defaults): {settings}")
    try:
        results = extract_many(
            todo,
            args.store,
            channels,
            cfg,
            args.force,
            backend=args.backend,
            jobs=args.jobs,
            scheduler=args.scheduler,
            on_result=_stop_when_disk_full,
        )
    except ConnectionError as e:  # no scheduler there (a BackendError: main's usage error)
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (terminate_as_interrupt)
        print(
            "\ninterrupted: finished sessions are stored, no partial shard was left; re-run to resume",
            file=sys.stderr,
        )
        return interrupt_exit_code(e)
    layouts = {s.session: s.layout for s in todo}  # the computed channels in the corpus's words
    return print_extract_summary(pre_failed + results, started, layouts)


def cmd_import(args: argparse.Namespace) -> int:
    try:
        report = import_tables(
            args.table_dir,
            args.store,
            role=args.role,
            channel=args.channel,
            fps=args.fps,
            progress=True,
            groups=args.groups,
            lookahead_s=args.lookahead_s,
            session=args.session,
            allow_outside=args.allow_outside_paths,
        )
    except ValueError as e:  # a bad --channel name or --lookahead-s
        raise UsageError(str(e)) from e
    return print_import(report, args.table_dir, "<recording id>.csv or .parquet")


def cmd_labels(args: argparse.Namespace) -> int:
    try:
        report = import_labels(
            args.annotation_dir,
            args.store,
            target=args.target,
            fps=args.fps,
            progress=True,
            allow_outside=args.allow_outside_paths,
        )
    except ValueError as e:  # a bad --target name or --fps
        raise UsageError(str(e)) from e
    return print_import(report, args.annotation_dir, "Subject_<L>_Story_<S>.csv")


def cmd_ratings(args: argparse.Namespace) -> int:
    from .extraction.ratings import RatingsTableError, import_ratings  # startup: only this verb

    _check_store(args.store)
    try:
        report = import_ratings(args.table, args.store, progress=True)
    except RatingsTableError as e:
        raise UsageError(str(e)) from e
    print(
        f"ratings {', '.join(report.targets)}: {len(report.written)} session(s) written, "
        f"{len(report.current)} already current, in {args.store}"
    )
    return EXIT_OK


def cmd_transcripts(args: argparse.Namespace) -> int:
    check_overrides_apply(args.set, channels_of_kind("transcript"), "transcripts", top_level=False)
    report = import_transcripts(
        args.transcript_dir,
        args.store,
        force=args.force,
        progress=True,
        cfg=_load_cfg(args),
        allow_outside=args.allow_outside_paths,
    )
    expected = "transcribed_subject_<L>_story_<S>.srt or Subject_<L>_Story_<S>.ass"
    return print_import(report, args.transcript_dir, expected)


def _check_store(store: str) -> None:
    """A :class:`FeaturestoreError` (exit code 1) when the store folder does not exist."""
    if not Path(store).is_dir():
        raise FeaturestoreError(
            f"feature store {store}: no such folder; build it with `make features` (or "
            f"`featurestore extract DATA_DIR --store {store}`), or pass the store's folder with --store"
        )


def cmd_ls(args: argparse.Namespace) -> int:
    _check_store(args.store)
    df = Store(args.store).sessions()
    if df.empty:
        print(
            f"no shards in {args.store}; run `featurestore extract` or `make features`",
            file=sys.stderr,
        )
        return EXIT_FAILED
    store_table(df)
    return EXIT_OK


def cmd_inspect(args: argparse.Namespace) -> int:
    _check_store(args.store)
    store = Store(args.store)
    if ls := parse_session(args.session):  # any case, as scan matches file names
        args.session = session_name(*ls)
    meta, keys = store.meta(args.session), store.channel_keys(args.session)
    print_session(store, args.session, meta, keys, columns=args.columns)
    return EXIT_OK


def _recorded_corpus(store: Path) -> tuple[str, list[str]] | None:
    """(the store's ``manifest.json``, the sessions ``extract`` would extract from it), or None."""
    manifest = store / MANIFEST
    if not manifest.exists():
        return None
    try:
        sessions, dups = read_scan_json(manifest)
    except (OSError, ValueError, KeyError) as e:
        raise UsageError(
            f"{manifest} is not a manifest `featurestore scan` wrote ({e}); re-run "
            f"`featurestore scan DATA_DIR --store {store}`"
        ) from e
    todo, _ = _split_todo(sessions, dups)
    return str(manifest), [s.session for s in todo]


def cmd_verify(args: argparse.Namespace) -> int:
    _check_store(args.store)
    versions = {name: cls.version for name, cls in registry().items()} | RULE_VERSIONS
    store = Store(args.store)
    corpus = _recorded_corpus(Path(args.store))
    problems = store.verify(
        current_versions=versions, check_sources=not args.no_sources, corpus=corpus
    )
    n = len(store.list_sessions())
    if corpus is None:
        print(
            f"  note: {args.store} records no corpus ({MANIFEST}, written by `featurestore scan "
            f"DATA_DIR --store {args.store}`): shards missing from it cannot be found"
        )
    for tmp in store.temp_files():
        print(
            f"  note: {tmp.name} is a temporary file left by a killed writer (no shard is affected); "
            "the next `featurestore extract` removes it"
        )
    faulty = {p.session for p in problems}  # a shard read only if verify found it sound
    if blind := store.predict_only(s for s in store.list_sessions() if s not in faulty):
        print(
            f"  predict only: {len(blind)} shard(s) without labels ({some(blind)}): a sweep "
            "neither trains nor scores them"
        )
    if problems:
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        print(f"verify: {len(problems)} problem(s) in {args.store} ({n} shards)", file=sys.stderr)
        return EXIT_FAILED
    print(f"verify: {n} shards in {args.store} are readable, consistent and current")
    return EXIT_OK


def cmd_demo(args: argparse.Namespace) -> int:
    # lazily: the demo is a user feature of its own (scikit-image's photo, the face rig)
    from .demo import build_demo, build_monadic_demo

    t0 = time.perf_counter()
    if args.layout == "monadic":
        build: Callable[..., Any] = build_monadic_demo
        sizes: dict[str, Any] = {"n_persons": args.persons, "tasks": tuple(args.tasks)}
    else:
        build, sizes = build_demo, {"n_listeners": args.listeners, "stories": tuple(args.stories)}
    out, duration = DEMO_DEFAULTS[args.layout]
    try:
        info = build(args.out or out, duration_s=args.duration or duration, seed=args.seed, **sizes)
    except ValueError as e:  # --listeners, --stories or --duration out of range
        raise UsageError(str(e)) from e
    except ImportError as e:  # the demo extra is not installed
        raise FeaturestoreError(str(e)) from e
    print(f"demo corpus in {info.out_dir} ({time.perf_counter() - t0:.1f} s): {info}")
    return EXIT_OK


#: demo layout -> (its default folder, seconds per session)
DEMO_DEFAULTS = {"omg": ("demo_data", 24.0), "monadic": ("demo_monadic", 8.0)}


# ------------------------------------------------------------------------- the verbs
STORE = opt(
    "--store", default=DEFAULT_STORE, help=f"feature store folder (default: {DEFAULT_STORE}/)"
)
CONFIG = opt("--config", help="featurestore YAML (default: DATA_DIR/featurestore.yaml if present)")
FORCE = opt("--force", action="store_true", help="recompute even current channels")
MANIFEST_OPT = opt(
    "--manifest",
    help="CSV or YAML with one row per session (columns: session, person, group, "
    "[partner, split, fold, video | video_person/video_partner, audio, audio_person/"
    "audio_partner, split_x, transcript, label_<target>, import_<role>_<channel>]); "
    "replaces the search for "
    "Subject_<L>_Story_<S> names (also `manifest:` in featurestore.yaml); whole-session "
    "ratings: columns rating_<target> or rating_<target>@<rater>, one number each",
)

ALLOW_OUTSIDE = opt(
    "--allow-outside-paths",
    action="store_true",
    help="read files a manifest names outside its folder (and a config's manifest outside the "
    "config's folder), or files and folders under the scanned folder linked from outside it; "
    "refused by default",
)


def set_opt(examples: str) -> Option:
    """``--set KEY=VALUE``, with the verb's ``examples``."""
    return opt(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"override a setting of the config (repeatable; VALUE is YAML): {examples}; "
        "it enters the channel's cache key; a setting the verb does not use is refused",
    )


VERBS = (
    Verb(cmd_scan, "list the sessions found in a data folder; write the manifest", [
        opt("data_dir", nargs="?", help="corpus folder (Subject_<L>_Story_<S> files at any depth; "
            "not needed with --manifest)"),
        STORE, MANIFEST_OPT, ALLOW_OUTSIDE, CONFIG,
    ]),
    Verb(cmd_extract, "compute missing or stale channels for every session", [
        opt("data_dir", nargs="?", help="data folder (default: the manifest written by `scan`)"),
        STORE, MANIFEST_OPT, ALLOW_OUTSIDE,
        opt("--channels", nargs="+", help="extractors to run (default: face_geom egemaps speech "
            "lexicon; speech and lexicon only where a session has a transcript)"),
        opt("--jobs", type=int, default=1, help="sessions in parallel processes"),
        opt("--backend", default="processes", metavar="NAME",
            help=f"where sessions run: {backends_help()} (default: processes)"),
        opt("--scheduler", help="address of an existing cluster's scheduler, for a backend that "
            "joins one (dask)"),
        FORCE,
        opt("--face-fps", type=float, help="face sampling rate in frames/s (default 5; 25 = every frame)"),
        opt("--split-x", type=int, help="x where the listener crop starts (default 1080/2560 of the width)"),
        opt("--sessions", nargs="+", help="only these session ids"),
        CONFIG,
        set_opt("an extractor's (--set face_au.device=cuda --set face_geom.redetect_every_s=0.5) "
                "or a top-level key (--set face_fps=10)"),
    ]),
    Verb(cmd_import, "import per-frame tables (CSV/Parquet, OpenFace, py-feat) as a channel", [
        opt("table_dir", help="folder of tables named by recording id (a manifest's session, "
            "e.g. rec01.csv) or Subject_<L>_Story_<S>.csv/.parquet; with --session, one table"),
        opt("--role", required=True, choices=["speaker", "listener", "scene", "person", "partner"],
            help="whose features the tables hold (person/partner: a manifest's words for "
            "listener/speaker; scene: the whole recording, e.g. its audio)"),
        opt("--session", metavar="ID", help="store the one table TABLE_DIR as this recording's"),
        opt("--channel", required=True,
            help="channel name to store them as (ROLE/NAME in a feature set), e.g. openface"),
        STORE,
        opt("--fps", type=float, default=25.0, help="frame rate of a `frame` column (default 25)"),
        opt("--groups", nargs="+", help="column groups to keep of an OpenFace table (au pose gaze "
            "landmarks landmarks_3d eye_landmarks shape; default au pose gaze) or a py-feat table "
            "(au emotion pose landmarks; default au emotion pose)"),
        opt("--lookahead-s", type=float, help="seconds read past each row (default: none)"),
        ALLOW_OUTSIDE,
    ]),
    Verb(cmd_labels, "import valence annotation CSVs as a label target", [
        opt("annotation_dir", help="folder of Subject_<L>_Story_<S>.csv ratings"),
        opt("--target", required=True,
            help="label name, e.g. valence_self, valence_observer_listener"),
        STORE,
        opt("--fps", type=float, default=25.0, help="rows per second of the ratings (default 25)"),
        ALLOW_OUTSIDE,
    ]),
    Verb(cmd_ratings,
         "import whole-session ratings (one number per session) from a CSV table", [
        opt("table", metavar="FILE", help="CSV table: session,<target>[,...][,rater]"),
        STORE,
    ], description="Store whole-session ratings (e.g. a questionnaire score per conversation) "
       "as /session_labels/<target> of existing shards. FILE is a CSV with the header "
       "session,<target>[,<target>...][,rater]; with a rater column the stored rating is the "
       "mean over raters. A manifest's rating_<target> columns do the same at extraction."),
    Verb(cmd_transcripts,
         "transcripts (.srt/.ass) -> speech and lexicon channels; per-role voice from the cues", [
        opt("transcript_dir", help="folder of transcribed_subject_<L>_story_<S>.srt or .ass files"),
        STORE, FORCE,
        opt("--config", help="featurestore YAML with the speech/lexicon settings (default: none, "
            "the defaults)"),
        set_opt("a speech or lexicon setting (--set lexicon.window_s=8)"),
        ALLOW_OUTSIDE,
    ]),
    Verb(cmd_ls, "list the shards of a store", [STORE]),
    Verb(cmd_inspect, "channels, shapes, valid fraction and provenance of a session", [
        opt("session", help="session id, e.g. Subject_1_Story_1"),
        STORE,
        opt("--columns", action="store_true", help="also list column names"),
    ]),
    Verb(cmd_verify, "check every shard; non-zero exit with the reasons", [
        STORE,
        opt("--no-sources", action="store_true", help="skip re-fingerprinting source videos"),
    ]),
    Verb(cmd_demo, "build an embedded demo corpus", [
        opt("--layout", choices=tuple(DEMO_DEFAULTS), default="omg",
            help="omg: OMG-Empathy's layout (dyads, Subject_<L>_Story_<S> names; the default); "
            "monadic: one person per session, a video and an audio file each, two raters, a "
            "manifest.csv (scan it with --manifest)"),
        opt("--out", default=None,
            help="folder to write (default: demo_data/, or demo_monadic/ for --layout monadic)"),
        opt("--listeners", type=int, default=6, help="omg: listeners (default 6)"),
        opt("--persons", type=int, default=4, help="monadic: persons (default 4)"),
        opt("--tasks", type=int, nargs="+", default=[1, 2, 3, 4],
            help="monadic: task numbers (default 1-4: train picture, recall; val plan; test opinion)"),
        opt("--stories", type=int, nargs="+", default=[1, 2, 3, 4, 5, 6],
            help="story numbers (default 1-6: train 2, 4, 5; validation 1; test 3, 6)"),
        opt("--duration", type=float, default=None,
            help="seconds per session (default 24; monadic 8)"),
        opt("--seed", type=int, default=0, help="random seed (default 0)"),
    ]),
)  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    """The ``featurestore`` parser: one sub-parser per entry of :data:`VERBS`."""
    description = "OMG-Empathy videos -> per-frame features in HDF5 shards"
    return make_parser("featurestore", description, __version__, VERBS)


def main(argv: list[str] | None = None) -> int:
    """Run ``featurestore VERB ...``; the exit code (0 ok, 1 failures, 2 usage error, 130 Ctrl-C,
    143 SIGTERM)."""
    args = parse_args(build_parser(), argv)
    if isinstance(args, int):
        return args

    def run() -> int:
        try:
            return int(args.func(args) or 0)
        except FileNotFoundError as e:
            print(f"error: {e}", file=sys.stderr)
            return EXIT_USAGE

    return run_verb(run, "error", f"featurestore {args.verb}: {{what}}; re-run to resume")


if __name__ == "__main__":
    sys.exit(main())
