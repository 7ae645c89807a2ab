"""`experiments agreement` and `experiments sessions` on a store of another corpus than
OMG-Empathy (a monadic manifest corpus: persons p01.., groups named by task), with no config of
its own: the store's targets, roles and channels, its words in the reports."""

from __future__ import annotations

import numpy as np
import pytest

from experiments.cli import main
from experiments.studies.corpus_config import person_ids
from experiments.studies.session_config import load_session_config
from experiments.studies.session_level import run_sessions
from featurestore.storage.shard import Channel, SessionMeta
from featurestore.storage.store import Store
from tests.experiments.helpers import build_session_rating_store

GROUPS = {"picture": "train", "recall": "train", "plan": "val", "opinion": "test"}


@pytest.fixture(scope="module")
def monadic(tmp_path_factory):
    """4 persons x 4 tasks of 20 s at 25 fps: ``person``'s face channel (5 fps) follows a hidden
    state that the ``valence`` follows 1 s later; ``arousal`` is 0.6 valence plus noise."""
    root = tmp_path_factory.mktemp("monadic_store")
    store = Store(root, mode="a")
    n, t_face = 500, np.arange(0, 20, 0.2)
    for p in range(1, 5):
        for g, (task, split) in enumerate(GROUPS.items(), 1):
            rng = np.random.default_rng(p * 10 + g)
            grid = np.arange(-2, 21, 0.5)
            state = np.interp(np.arange(-2, 21, 0.01), grid, rng.normal(0, 0.5, len(grid)))
            y = np.interp(np.arange(n) / 25 - 1, np.arange(-2, 21, 0.01), state)
            face = np.interp(t_face, np.arange(-2, 21, 0.01), state)[:, None] + rng.normal(
                0, 0.1, (len(t_face), 3)
            )
            meta = SessionMeta(
                f"p0{p}_{task}", p, g, 0, split, n, layout="manifest", person=f"p0{p}", group=task
            )
            channel = Channel(face, t_face, np.ones(len(t_face), bool), ["a", "b", "c"])
            labels = {
                "valence": y.astype(np.float32),
                "arousal": (0.6 * y + rng.normal(0, 0.05, n)).astype(np.float32),
            }
            store.write_session(meta, channels={"listener/face_geom": channel}, labels=labels)
    return root


def test_person_ids_are_the_manifests(monadic):
    assert person_ids(monadic) == {1: "p01", 2: "p02", 3: "p03", 4: "p04"}


def _agreement(store, tracking_dir, out, *extra: str) -> int:
    args = ["agreement", "--store", str(store), "--tracking-uri", tracking_dir]
    return main([*args, "--targets", "valence", "arousal", "--out", str(out), *extra])


def test_agreement_runs_on_a_monadic_store_without_a_config_in_its_words(
    monadic, tracking_dir, tmp_path
):
    # before: the packaged OMG ablation config was checked against the store (6 problems)
    assert _agreement(monadic, tracking_dir, tmp_path / "nc", "--no-cross") == 0
    md = (tmp_path / "nc" / "agreement.md").read_text()
    assert "one person per session (no partner)" in md
    assert "mean over persons of each person's mean over groups" in md
    assert "Not computed (--no-cross)." in md
    assert "| p01_opinion | test |" in md
    assert "stories" not in md and "over listeners" not in md
    # the cross-target model: a feature set of the store's own role and channels
    assert _agreement(monadic, tracking_dir, tmp_path / "cross") == 0
    md = (tmp_path / "cross" / "agreement.md").read_text()
    assert "feature set `person` (person/face_geom)" in md
    assert "| valence | arousal |" in md.split("## Cross-target")[1]


def test_sessions_takes_the_channels_in_the_corpus_words(tmp_path):
    store = build_session_rating_store(tmp_path / "store")
    cfg = load_session_config(
        {"target": "empathy", "channels": ["person/face_geom"], "models": [{"name": "dummy"}]}
    )
    res = run_sessions(
        cfg, store, out_dir=tmp_path, tracking_uri=str(tmp_path / "mlruns"), progress=False
    )
    assert res.n_sessions == 40
    assert (
        "summaries mean, std, p10, p90 of the valid rows of person/face_geom."
        in res.files[1].read_text()
    )
