"""What a shard holds that its sources no longer give, decided before any decoding
(docs/store.md, sources tracked by content)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from ..errors import FeaturestoreError
from ..sources.annotations import read_label_file
from ..sources.manifest import SessionFiles

#: the ``by`` of a label source that ``featurestore extract`` read from the corpus
EXTRACTED = "extract"


class StaleSourceError(FeaturestoreError, ValueError):
    """A source the shard's labels were read from can no longer be read; the message names it."""


def check_label_sources(sf: SessionFiles, stored: Mapping[str, dict]) -> None:
    """:class:`StaleSourceError` for a session whose stored labels (label key -> recorded
    source) came from a file it no longer provides because it cannot be read or, for labels
    ``extract`` read, because it is gone."""
    for key, src in sorted(stored.items()):
        path = src.get("path") if isinstance(src, Mapping) else None
        if key in sf.annotations or not isinstance(path, str):
            continue  # provided now (re-read when it changed), or a mean over raters
        p = Path(path)
        rebuild = (
            "move the shard aside and re-run `featurestore extract` to rebuild it without them"
        )
        if not p.exists():
            if src.get("by") == EXTRACTED:
                raise StaleSourceError(
                    f"{sf.session}: labels {key!r} in the shard were read from {p}, which is gone; "
                    f"restore it, or {rebuild}"
                )
            continue  # imported from elsewhere (`featurestore labels`): verify reports it
        try:
            read_label_file(p)
        except (OSError, ValueError) as e:
            raise StaleSourceError(
                f"{sf.session}: labels {key!r} in the shard were read from {p}, which can no longer "
                f"be read ({e}); save it as a UTF-8 CSV again and re-run, or {rebuild}"
            ) from e


def vanished_channels(
    planned: Sequence[str],
    extractors: Sequence[str],
    stored: Mapping[str, dict],
    media: Sequence[Path],
) -> list[str]:
    """The stored channels to remove: those of an extractor in ``extractors`` that plans none
    now, whose recorded source is one of the session's ``media`` (it lost the track) or is
    gone, and the channels derived from them."""
    names = {k.split("/")[1] for k in planned}
    own = {Path(m).absolute() for m in media}
    gone = []
    for key, src in stored.items():
        name = key.split("/")[1]
        path = src.get("path")
        if name not in extractors or name in names or "upstream" in src or not path:
            continue
        if Path(path).absolute() in own or not Path(path).exists():
            gone.append(key)
    derived = [
        key
        for key, src in stored.items()
        if any(f"{g}=" in str(src.get("upstream", "")) for g in gone)
    ]
    return sorted(set(gone + derived))
