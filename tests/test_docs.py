"""The README and docs/ pages against the code: links resolve, the command line and the module map are complete.

The README's module map is read as lines of the form ``- `featurestore/storage/store.py` what it does``
(indented under its sub-package's line or not)
(a package or a data folder ends in ``/``); it must name every module of ``featurestore/`` and
``experiments/`` exactly once and nothing that does not exist.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]
PACKAGES = ("featurestore", "experiments")

FENCE = re.compile(r"^```.*?^```", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
MAP_LINE = re.compile(r"^\s*- `((?:featurestore|experiments)/[^`]*)`", re.M)


def prose(text: str) -> str:
    """Markdown without fenced blocks and inline code (where a bracket is not a link)."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def section(text: str, title: str) -> str:
    """The body of the level-2 section ``## title`` (up to the next level-2 heading)."""
    parts = re.split(r"^## ", text, flags=re.M)
    found = [p for p in parts if p.splitlines()[0].strip() == title]
    assert len(found) == 1, f"README has {len(found)} sections '## {title}'"
    return found[0]


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens.

    >>> slug("Extraction settings (`featurestore.yaml`)")
    'extraction-settings-featurestoreyaml'
    >>> slug("Out-of-fold vs. in-sample rescaling")
    'out-of-fold-vs-in-sample-rescaling'
    """
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of a page, with GitHub's -1, -2 ... for repeated headings."""
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(
        r"^#{1,6} (.+)$", FENCE.sub("", page.read_text(encoding="utf-8")), re.M
    ):
        base = slug(heading)
        n = seen.get(base, 0)
        out.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_points_to_an_existing_file_and_anchor(page):
    broken = []
    for target in LINK.findall(prose(page.read_text(encoding="utf-8"))):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(
                f"{target}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}"
            )
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            broken.append(f"{target}: no heading with the anchor #{anchor} in {dest.name}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_every_docs_page_is_linked_from_the_readme():
    linked = {
        (ROOT / t.partition("#")[0]).resolve()
        for t in LINK.findall(prose(README.read_text(encoding="utf-8")))
    }
    orphans = [p.name for p in PAGES[1:] if p.resolve() not in linked]
    assert not orphans, f"docs pages the README does not link to: {orphans}"


def _verbs(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {
        o for a in parser._actions for o in a.option_strings if o.startswith("--") and o != "--help"
    }


@pytest.mark.parametrize("program", PACKAGES)
def test_the_command_line_section_lists_every_verb_and_option(program):
    from importlib import import_module

    parser = import_module(f"{program}.cli").build_parser()
    text = section(README.read_text(encoding="utf-8"), "Command line")
    listed = set(re.findall(rf"^{program} (\w+)", text, re.M))
    verbs = _verbs(parser)
    assert set(verbs) - listed == set(), (
        f"verbs of `{program}` missing from the README's command line"
    )
    assert listed - set(verbs) == set(), (
        f"the README's command line lists verbs `{program}` does not have"
    )
    missing = {f"{program} {v} {o}" for v, p in verbs.items() for o in _options(p) if o not in text}
    assert not missing, f"options missing from the README's command line: {sorted(missing)}"


def _modules() -> set[str]:
    """Every module of the packages: .py files and sub-packages (``dir/``), without __init__/__main__."""
    out = set()
    for package in PACKAGES:
        for p in (ROOT / package).rglob("*"):
            rel = p.relative_to(ROOT).as_posix()
            if "__pycache__" in p.parts:
                continue
            if p.suffix == ".py" and p.stem not in ("__init__", "__main__"):
                out.add(rel)
            elif p.is_dir() and (p / "__init__.py").exists() and p != ROOT / package:
                out.add(rel + "/")
    return out


def test_the_module_map_names_every_module_once_and_nothing_else():
    entries = MAP_LINE.findall(section(README.read_text(encoding="utf-8"), "Module map"))
    twice = sorted({e for e in entries if entries.count(e) > 1})
    assert not twice, f"modules with more than one line in the module map: {twice}"
    gone = sorted(
        e for e in entries if not (ROOT / e).exists() or (ROOT / e).is_dir() != e.endswith("/")
    )
    assert not gone, f"the module map names what does not exist (a folder ends in /): {gone}"
    missing = sorted(_modules() - set(entries))
    assert not missing, f"modules without a line in the README's module map: {missing}"


def test_the_two_commands_open_the_readme():
    """``make demo`` and ``make test`` are the first thing a reader sees."""
    first_block = FENCE.search(README.read_text(encoding="utf-8")).group(0).splitlines()[1:-1]
    assert [line.split()[:2] for line in first_block] == [["make", "demo"], ["make", "test"]]


def test_citation_file_names_the_package_version():
    """CITATION.cff (how to cite the package itself) carries the version the package reports."""
    import yaml

    import featurestore

    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0" and cff["license"] == "MIT"
    assert str(cff["version"]) == featurestore.__version__, "update CITATION.cff's version"
