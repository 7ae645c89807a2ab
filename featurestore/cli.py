"""``featurestore`` command line: scan, extract, import, labels, ratings, transcripts, ls, inspect, verify, demo.

Exit codes: 0 all good, 1 some sessions failed (a summary says which and why), 2 usage error.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from . import __version__
from .demo import DemoInfo, MonadicDemoInfo, build_demo, build_monadic_demo
from .extraction.config import ConfigError, _hint, check_overrides_apply, load_feature_config
from .extraction.derived import RULE_VERSIONS
from .extraction.extract import SessionResult
from .extraction.imports import import_labels, import_tables, import_transcripts
from .extraction.pool import extract_many
from .extraction.summary import print_extract_summary, print_import, print_session, print_table
from .extractors import ExtractorUnavailable, registry
from .processes import terminate_as_interrupt
from .sources.manifest import read_scan_json, scan, write_manifest
from .sources.manifest_file import ManifestError
from .storage.shard import TRANSCRIPT_CHANNELS
from .storage.store import Store, StoreError, parse_session, session_name

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
MANIFEST = "manifest.json"


def _load_cfg(args):
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


def _check_channels(channels: list[str]) -> None:
    """Unknown ``--channels`` names are a usage error naming the nearest extractor."""
    names = list(registry())
    for c in channels:
        if c not in names:
            raise ConfigError(f"--channels: unknown extractor {c!r}{_hint(c, names, 'extractors')}")


def _scan(data_dir: Path | None, cfg, manifest: str | None = None):
    """Sessions of ``--manifest``, else of the config's ``manifest``, else found in ``data_dir``."""
    manifest = manifest or cfg.manifest
    if manifest is None and data_dir is None:
        raise SystemExit("give a DATA_DIR, or a manifest with --manifest FILE")
    try:
        return scan(data_dir, cfg.story_speaker, cfg.splits, manifest=manifest)
    except ManifestError as e:
        raise SystemExit(str(e)) from e


def cmd_scan(args) -> int:
    cfg = _load_cfg(args)
    report = _scan(Path(args.data_dir) if args.data_dir else None, cfg, args.manifest)
    where = args.manifest or cfg.manifest or args.data_dir
    rows = [
        {
            "session": s.session,
            "listener": s.listener,
            "story": s.story,
            "speaker": s.speaker,
            "split": s.split,
            "video": s.video.name if s.video else "-",
            "labels": ",".join(sorted(s.annotations)) or "-",
            "transcript": "yes" if s.transcript else "-",
        }
        for s in report.sessions
    ]
    print_table(
        rows, ["session", "listener", "story", "speaker", "split", "video", "labels", "transcript"]
    )
    print(
        f"\n{len(report.sessions)} sessions, {sum(1 for s in report.sessions if s.video)} "
        f"with a shared video in {where}"
    )
    for issue in report.issues:
        print(f"  {issue}", file=sys.stderr)
    out = write_manifest(report, Path(args.store) / MANIFEST)
    print(f"manifest written to {out}")
    serious = [i for i in report.issues if i.kind in ("duplicate", "unparsable")]
    if not report.sessions:
        print(f"no Subject_<L>_Story_<S> files found under {args.data_dir}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_FAILED if serious else EXIT_OK


def _sessions_for_extract(args, cfg):
    if args.data_dir or args.manifest or cfg.manifest:
        report = _scan(Path(args.data_dir) if args.data_dir else None, cfg, args.manifest)
        return report.sessions, report.duplicates()
    manifest = Path(args.store) / MANIFEST
    if not manifest.exists():
        raise SystemExit(
            f"no DATA_DIR given and no {manifest}; run `featurestore scan DATA_DIR --store {args.store}` first"
        )
    return read_scan_json(manifest)


def cmd_extract(args) -> int:
    started = time.perf_counter()
    cfg = _load_cfg(args)
    channels = args.channels or cfg.channels
    _check_channels(channels)
    check_overrides_apply(args.set, channels, "extract")
    sessions, dups = _sessions_for_extract(args, cfg)
    if args.sessions:
        wanted = set(args.sessions)
        sessions = [s for s in sessions if s.session in wanted]
    pre_failed = []
    todo = []
    for s in sessions:
        if s.session in dups:
            files = ", ".join(str(p) for p in [s.video, *dups[s.session]] if p)
            pre_failed.append(
                SessionResult(
                    s.session,
                    status="failed",
                    error=f"several files for one session ({files}); keep one and re-run",
                )
            )
        elif s.video is None and not any(k.startswith("video_") for k in s.media):
            continue  # annotation without video: reported by scan
        else:
            todo.append(s)
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
            force=args.force,
            executor=args.executor,
            jobs=args.jobs,
            scheduler=args.scheduler,
        )
    except (
        ExtractorUnavailable,
        ConnectionError,
    ) as e:  # ConnectionError: no Dask scheduler at --scheduler
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FAILED
    except KeyboardInterrupt:
        print(
            "\ninterrupted: finished sessions are stored, no partial shard was left; re-run to resume",
            file=sys.stderr,
        )
        return 130
    return print_extract_summary(pre_failed + results, started)


def cmd_import(args) -> int:
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
        )
    except ValueError as e:  # a bad --channel name or --lookahead-s
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    return print_import(report, args.table_dir, "Subject_<L>_Story_<S>.csv or .parquet")


def cmd_labels(args) -> int:
    try:
        report = import_labels(
            args.annotation_dir, args.store, target=args.target, fps=args.fps, progress=True
        )
    except ValueError as e:  # a bad --target name or --fps
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    return print_import(report, args.annotation_dir, "Subject_<L>_Story_<S>.csv")


def cmd_ratings(args) -> int:
    from .extraction.ratings import RatingsTableError, import_ratings  # startup: only this verb

    if _missing_store(args.store):
        return EXIT_FAILED
    try:
        report = import_ratings(args.table, args.store, progress=True)
    except RatingsTableError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    print(
        f"ratings {', '.join(report.targets)}: {len(report.written)} session(s) written, "
        f"{len(report.current)} already current, in {args.store}"
    )
    return EXIT_OK


def cmd_transcripts(args) -> int:
    check_overrides_apply(args.set, TRANSCRIPT_CHANNELS, "transcripts", top_level=False)
    cfg = _load_cfg(args)
    report = import_transcripts(
        args.transcript_dir, args.store, force=args.force, progress=True, cfg=cfg
    )
    return print_import(
        report,
        args.transcript_dir,
        "transcribed_subject_<L>_story_<S>.srt or Subject_<L>_Story_<S>.ass",
    )


def _missing_store(store: str) -> bool:
    """Say so (on stderr) when the store folder does not exist."""
    if Path(store).is_dir():
        return False
    print(
        f"error: feature store {store}: no such folder; build it with `make features` (or "
        f"`featurestore extract DATA_DIR --store {store}`), or pass the store's folder with --store",
        file=sys.stderr,
    )
    return True


def cmd_ls(args) -> int:
    if _missing_store(args.store):
        return EXIT_FAILED
    df = Store(args.store).sessions()
    if df.empty:
        print(
            f"no shards in {args.store}; run `featurestore extract` or `make features`",
            file=sys.stderr,
        )
        return EXIT_FAILED
    rows = df.assign(
        channels=df.channels.map(lambda c: ",".join(c)),
        targets=df.targets.map(lambda t: ",".join(t)),
    ).to_dict("records")
    print_table(
        rows,
        ["session", "listener", "story", "speaker", "split", "n_frames", "channels", "targets"],
    )
    return EXIT_OK


def cmd_inspect(args) -> int:
    if _missing_store(args.store):
        return EXIT_FAILED
    store = Store(args.store)
    if ls := parse_session(args.session):  # any case, as scan matches file names
        args.session = session_name(*ls)
    try:
        meta = store.meta(args.session)
        keys = store.channel_keys(args.session)
    except StoreError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_FAILED
    print_session(store, args.session, meta, keys, columns=args.columns)
    return EXIT_OK


def cmd_verify(args) -> int:
    if _missing_store(args.store):
        return EXIT_FAILED
    versions = {name: cls.version for name, cls in registry().items()} | RULE_VERSIONS
    store = Store(args.store)
    problems = store.verify(current_versions=versions, check_sources=not args.no_sources)
    n = len(store.list_sessions())
    for tmp in store.temp_files():
        print(
            f"  note: {tmp.name} is a temporary file left by a killed writer (no shard is affected); "
            "the next `featurestore extract` removes it"
        )
    if problems:
        for p in problems:
            print(f"  {p}", file=sys.stderr)
        print(f"verify: {len(problems)} problem(s) in {args.store} ({n} shards)", file=sys.stderr)
        return EXIT_FAILED
    print(f"verify: {n} shards in {args.store} are readable, consistent and current")
    return EXIT_OK


def cmd_demo(args) -> int:
    t0 = time.perf_counter()
    info: DemoInfo | MonadicDemoInfo
    try:
        if args.layout == "monadic":
            info = build_monadic_demo(
                args.out or "demo_monadic",
                n_persons=args.persons,
                tasks=tuple(args.tasks),
                duration_s=args.duration or 8.0,
                seed=args.seed,
            )
        else:
            info = build_demo(
                args.out or "demo_data",
                n_listeners=args.listeners,
                stories=tuple(args.stories),
                duration_s=args.duration or 24.0,
                seed=args.seed,
            )
    except ValueError as e:  # --listeners, --stories or --duration out of range
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    print(f"demo corpus in {info.out_dir} ({time.perf_counter() - t0:.1f} s): {info}")
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="featurestore", description="OMG-Empathy videos -> per-frame features in HDF5 shards"
    )
    p.add_argument("--version", action="version", version=f"featurestore {__version__}")
    sub = p.add_subparsers(dest="verb", required=True, metavar="VERB")

    def store_arg(sp):
        sp.add_argument(
            "--store", default="features", help="feature store folder (default: features/)"
        )

    def set_arg(
        sp,
        examples="an extractor's (--set face_au.device=cuda --set "
        "face_geom.redetect_every_s=0.5) or a top-level key (--set face_fps=10)",
    ):
        sp.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help=f"override a setting of the config (repeatable; VALUE is YAML): {examples}; "
            "it enters the channel's cache key; a setting the verb does not use is refused",
        )

    def manifest_arg(sp):
        sp.add_argument(
            "--manifest",
            help="CSV or YAML with one row per session (columns: session, person, group, "
            "[partner, split, fold, video | video_person/video_partner, audio, audio_person/"
            "audio_partner, split_x, transcript, label_<target>]); replaces the search for "
            "Subject_<L>_Story_<S> names (also `manifest:` in featurestore.yaml); whole-session "
            "ratings: columns rating_<target> or rating_<target>@<rater>, one number each",
        )

    sp = sub.add_parser("scan", help="list the sessions found in a data folder; write the manifest")
    sp.add_argument(
        "data_dir",
        nargs="?",
        help="corpus folder (Subject_<L>_Story_<S> files at any depth; not needed with --manifest)",
    )
    store_arg(sp)
    manifest_arg(sp)
    sp.add_argument(
        "--config", help="featurestore YAML (default: DATA_DIR/featurestore.yaml if present)"
    )
    sp.set_defaults(func=cmd_scan)

    sp = sub.add_parser("extract", help="compute missing or stale channels for every session")
    sp.add_argument(
        "data_dir", nargs="?", help="data folder (default: the manifest written by `scan`)"
    )
    store_arg(sp)
    manifest_arg(sp)
    sp.add_argument(
        "--channels",
        nargs="+",
        help="extractors to run (default: face_geom egemaps speech lexicon; "
        "speech and lexicon only where a session has a transcript)",
    )
    sp.add_argument("--jobs", type=int, default=1, help="sessions in parallel processes")
    sp.add_argument(
        "--executor",
        choices=["local", "dask"],
        default="local",
        help="where sessions run: local processes (default) or a Dask cluster (--scheduler)",
    )
    sp.add_argument(
        "--scheduler", help="address of an existing Dask scheduler (with --executor dask)"
    )
    sp.add_argument("--force", action="store_true", help="recompute even current channels")
    sp.add_argument(
        "--face-fps",
        type=float,
        help="face sampling rate in frames/s (default 5; 25 = every frame)",
    )
    sp.add_argument(
        "--split-x",
        type=int,
        help="x where the listener crop starts (default 1080/2560 of the width)",
    )
    sp.add_argument("--sessions", nargs="+", help="only these session ids")
    sp.add_argument(
        "--config", help="featurestore YAML (default: DATA_DIR/featurestore.yaml if present)"
    )
    set_arg(sp)
    sp.set_defaults(func=cmd_extract)

    sp = sub.add_parser(
        "import", help="import per-frame tables (CSV/Parquet, OpenFace, py-feat) as a channel"
    )
    sp.add_argument("table_dir", help="folder of Subject_<L>_Story_<S>.csv or .parquet tables")
    sp.add_argument(
        "--role",
        required=True,
        choices=["speaker", "listener", "scene"],
        help="whose features the tables hold (scene: the whole recording, e.g. its audio)",
    )
    sp.add_argument(
        "--channel",
        required=True,
        help="channel name to store them as (ROLE/NAME in a feature set), e.g. openface",
    )
    store_arg(sp)
    sp.add_argument(
        "--fps", type=float, default=25.0, help="frame rate of a `frame` column (default 25)"
    )
    sp.add_argument(
        "--groups",
        nargs="+",
        help="column groups to keep of an OpenFace table (au pose gaze landmarks landmarks_3d "
        "eye_landmarks shape; default au pose gaze) or a py-feat table (au emotion pose "
        "landmarks; default au emotion pose)",
    )
    sp.add_argument("--lookahead-s", type=float, help="seconds read past each row (default: none)")
    sp.set_defaults(func=cmd_import)

    sp = sub.add_parser("labels", help="import valence annotation CSVs as a label target")
    sp.add_argument("annotation_dir", help="folder of Subject_<L>_Story_<S>.csv ratings")
    sp.add_argument(
        "--target", required=True, help="label name, e.g. valence_self, valence_observer_listener"
    )
    store_arg(sp)
    sp.add_argument(
        "--fps", type=float, default=25.0, help="rows per second of the ratings (default 25)"
    )
    sp.set_defaults(func=cmd_labels)

    sp = sub.add_parser(
        "ratings",
        help="import whole-session ratings (one number per session) from a CSV table",
        description="Store whole-session ratings (e.g. a questionnaire score per conversation) "
        "as /session_labels/<target> of existing shards. FILE is a CSV with the header "
        "session,<target>[,<target>...][,rater]; with a rater column the stored rating is the "
        "mean over raters. A manifest's rating_<target> columns do the same at extraction.",
    )
    sp.add_argument("table", metavar="FILE", help="CSV table: session,<target>[,...][,rater]")
    store_arg(sp)
    sp.set_defaults(func=cmd_ratings)

    sp = sub.add_parser(
        "transcripts",
        help="transcripts (.srt/.ass) -> speech and lexicon channels; per-role voice from the cues",
    )
    sp.add_argument(
        "transcript_dir", help="folder of transcribed_subject_<L>_story_<S>.srt or .ass files"
    )
    store_arg(sp)
    sp.add_argument("--force", action="store_true", help="recompute even current channels")
    sp.add_argument(
        "--config",
        help="featurestore YAML with the speech/lexicon settings (default: none, the defaults)",
    )
    set_arg(sp, "a speech or lexicon setting (--set lexicon.window_s=8)")
    sp.set_defaults(func=cmd_transcripts)

    sp = sub.add_parser("ls", help="list the shards of a store")
    store_arg(sp)
    sp.set_defaults(func=cmd_ls)

    sp = sub.add_parser(
        "inspect", help="channels, shapes, valid fraction and provenance of a session"
    )
    sp.add_argument("session", help="session id, e.g. Subject_1_Story_1")
    store_arg(sp)
    sp.add_argument("--columns", action="store_true", help="also list column names")
    sp.set_defaults(func=cmd_inspect)

    sp = sub.add_parser("verify", help="check every shard; non-zero exit with the reasons")
    store_arg(sp)
    sp.add_argument(
        "--no-sources", action="store_true", help="skip re-fingerprinting source videos"
    )
    sp.set_defaults(func=cmd_verify)

    sp = sub.add_parser("demo", help="build an embedded demo corpus")
    sp.add_argument(
        "--layout",
        choices=("omg", "monadic"),
        default="omg",
        help="omg: OMG-Empathy's layout (dyads, Subject_<L>_Story_<S> names; the default); "
        "monadic: one person per session, a video and an audio file each, two raters, a "
        "manifest.csv (scan it with --manifest)",
    )
    sp.add_argument(
        "--out",
        default=None,
        help="folder to write (default: demo_data/, or demo_monadic/ for --layout monadic)",
    )
    sp.add_argument("--listeners", type=int, default=6, help="omg: listeners (default 6)")
    sp.add_argument("--persons", type=int, default=4, help="monadic: persons (default 4)")
    sp.add_argument(
        "--tasks",
        type=int,
        nargs="+",
        default=[1, 2, 3, 4],
        help="monadic: task numbers (default 1-4: train picture, recall; val plan; test opinion)",
    )
    sp.add_argument(
        "--stories",
        type=int,
        nargs="+",
        default=[1, 2, 3, 4, 5, 6],
        help="story numbers (default 1-6: train 2, 4, 5; validation 1; test 3, 6)",
    )
    sp.add_argument(
        "--duration", type=float, default=None, help="seconds per session (default 24; monadic 8)"
    )
    sp.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    sp.set_defaults(func=cmd_demo)

    return p


def main(argv: list[str] | None = None) -> int:
    terminate_as_interrupt()
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:
        return EXIT_USAGE if e.code not in (0, None) else EXIT_OK
    try:
        return int(args.func(args) or 0)
    except (ConfigError, FileNotFoundError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    except SystemExit as e:
        if isinstance(e.code, str):
            print(f"error: {e.code}", file=sys.stderr)
            return EXIT_USAGE
        raise


if __name__ == "__main__":
    sys.exit(main())
