"""The checks of a config's folds and splits (:mod:`.validation` places each problem).

>>> check_splits("shard", "val")
{}
>>> check_folds(3, "kfold_person", True)
3
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from featurestore.sources.manifest import SPLITS

from ..errors import ExperimentsError
from .choices import suggest
from .options import (
    IDENTITY_PERSONALIZATIONS,
    IDENTITY_RESCALES,
    KFOLD_PROTOCOLS,
    PERSON_HELD_OUT,
    SPLIT_NAMES,
)

if TYPE_CHECKING:
    from .schema import ExperimentConfig


class ProtocolProblem(ExperimentsError, ValueError):
    """A bad ``folds`` or ``splits`` value: the dotted ``key`` and the ``message``."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(f"{key}: {message}")
        self.key = key
        self.message = message


def check_folds(value: Any, protocol: str, given: bool) -> int:
    """``folds``: an integer >= 2, meaningful (``given``) under the k-fold protocols only."""
    if not isinstance(value, int) or isinstance(value, bool) or value < 2:
        raise ProtocolProblem(
            "folds", f"expected a number of folds (an integer >= 2), got {value!r}"
        )
    if given and protocol not in KFOLD_PROTOCOLS:
        raise ProtocolProblem(
            "folds",
            f"folds applies to protocol {' or '.join(KFOLD_PROTOCOLS)}, not {protocol}; "
            "remove it or change the protocol",
        )
    return value


def person_held_out_problem(cfg: ExperimentConfig) -> tuple[str, str] | None:
    """(key, message) when a protocol that holds persons out meets an option that uses who is
    listening (a held-out person has no training rows to fit it on), else None."""
    if cfg.protocol not in PERSON_HELD_OUT:
        return None
    for key, values, identity in (
        ("personalization", cfg.personalization, IDENTITY_PERSONALIZATIONS),
        ("postprocess.rescale", cfg.postprocess.rescale, IDENTITY_RESCALES),
    ):
        bad = [v for v in values if v in identity]
        if bad:
            keep = [v for v in values if v not in identity] or (
                ["global"] if key == "personalization" else ["none"]
            )
            return key, (
                f"{', '.join(bad)} use(s) who is listening, but protocol {cfg.protocol} holds "
                f"each person out of training; use {key}: {keep}"
            )
    return None


def check_splits(value: Any, protocol: str) -> dict[str, list[int]]:
    """``splits``: stories (groups) per split, or ``shard`` (each session's split as its shard
    records it), returned as ``{}``."""
    if value == "shard":
        return {}
    value = {} if value is None else value
    if not isinstance(value, dict):
        raise ProtocolProblem(
            "splits", f"expected a mapping of split -> stories, or shard; got {value!r}"
        )
    for k in value:
        if k not in SPLIT_NAMES:
            raise ProtocolProblem(f"splits.{k}", f"unknown key{suggest(k, SPLIT_NAMES)}")
    out: dict[str, list[int]] = {}
    owner: dict[int, str] = {}
    for name in SPLIT_NAMES:
        if name not in value or value[name] is None:
            continue
        stories = value[name] if isinstance(value[name], list) else [value[name]]
        out[name] = []
        for s in stories:
            if not isinstance(s, int) or isinstance(s, bool) or s < 1:
                raise ProtocolProblem(
                    f"splits.{name}", f"expected story numbers (integers >= 1), got {s!r}"
                )
            if s in owner and owner[s] != name:
                raise ProtocolProblem(
                    f"splits.{name}",
                    f"story {s} is also in splits.{owner[s]}; a story belongs to one split",
                )
            owner[s] = name
            if s not in out[name]:
                out[name].append(s)
    if not out.get("train"):
        raise ProtocolProblem(
            "splits.train",
            f"no training stories; list them, e.g. train: {SPLITS['train']} (the official split)",
        )
    if protocol == "val" and not out.get("val"):
        raise ProtocolProblem(
            "splits.val",
            f"protocol val needs validation stories, e.g. val: {SPLITS['val']} "
            "(or use protocol: loso)",
        )
    return out
