"""Both command lines' ``--help``: every option explained, every example in it runs as printed."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from experiments.cli import build_parser as experiments_parser
from experiments.cli import main as experiments_main
from featurestore.cli import build_parser as featurestore_parser
from featurestore.extraction.config import check_overrides_apply, load_feature_config
from featurestore.extractors import channels_of_kind


def verbs(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    """Verb -> its parser."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def arguments(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The parser's options and positionals, without --help and the verb chooser."""
    return [
        a
        for a in parser._actions
        if not isinstance(a, argparse._HelpAction | argparse._SubParsersAction)
    ]


PARSERS = {"experiments": experiments_parser(), "featurestore": featurestore_parser()}


@pytest.mark.parametrize("prog", sorted(PARSERS))
def test_every_option_and_verb_has_help(prog: str) -> None:
    parser = PARSERS[prog]
    found = verbs(parser)
    assert len(found) >= 5
    missing = []
    for verb, sub in found.items():
        choices = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        if not sub.description and not any(
            a.help for a in choices._choices_actions if a.dest == verb
        ):
            missing.append(f"{prog} {verb}: no description")
        for a in arguments(sub):
            if not a.help or a.help == argparse.SUPPRESS:
                missing.append(f"{prog} {verb} {'/'.join(a.option_strings) or a.dest}")
    assert not missing, "options without help text: " + ", ".join(missing)


def set_examples(parser: argparse.ArgumentParser) -> list[str]:
    """The ``--set KEY=VALUE`` examples of a verb's help text."""
    text = parser.format_help().replace("\n", " ")
    text = re.sub(r"\s+", " ", text)
    return re.findall(r"--set ([a-z_][a-z0-9_.]*=(?:\[[^\]]*\]|[^\s,;:)\]]+))", text)


@pytest.mark.parametrize("verb", ["sweep", "ablate", "agreement"])
def test_experiments_help_examples_run_on_the_verbs_default_config(
    verb: str, capsys: pytest.CaptureFixture[str]
) -> None:
    examples = set_examples(verbs(PARSERS["experiments"])[verb])
    assert any("models." in e for e in examples) and len(examples) >= 2, examples
    for example in examples:
        assert experiments_main([verb, "--set", example, "--print-config"]) == 0, example
        capsys.readouterr()


@pytest.mark.parametrize("verb", ["extract", "transcripts"])
def test_featurestore_help_examples_are_valid_settings_for_the_verb(verb: str) -> None:
    sub = verbs(PARSERS["featurestore"])[verb]
    examples = set_examples(sub)
    assert examples
    applies = channels_of_kind("transcript") if verb == "transcripts" else None
    for example in examples:
        load_feature_config(overrides=[example])
        if applies is not None:
            check_overrides_apply([example], applies, verb, top_level=False)
        else:  # extract runs whichever extractor the setting names
            check_overrides_apply([example], ["face_geom", "face_au", "egemaps"], verb)


def test_a_setting_the_verb_does_not_use_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from featurestore.cli import main

    store = str(tmp_path / "store")
    assert (
        main(["transcripts", str(tmp_path), "--store", store, "--set", "face_au.device=cuda"]) == 2
    )
    err = capsys.readouterr().err
    assert "face_au does not apply to `featurestore transcripts`" in err
    assert "settings that apply: speech.SETTING, lexicon.SETTING" in err
    assert main(["transcripts", str(tmp_path), "--store", store, "--set", "face_fps=10"]) == 2
    assert "face_fps does not apply" in capsys.readouterr().err
    args = ["extract", str(tmp_path), "--store", store, "--channels", "face_geom"]
    assert main([*args, "--set", "egemaps.sampling_rate=8000"]) == 2
    assert "egemaps does not apply to `featurestore extract`" in capsys.readouterr().err
    assert not (tmp_path / "store").exists()  # refused before anything was written
