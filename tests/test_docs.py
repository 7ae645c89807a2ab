"""The README, the changelog and docs/ pages against the code.

- links resolve (files and heading anchors) and every page is linked from the README, which
  stays short (:data:`README_MAX_BYTES`) and opens with ``make demo`` and ``make test``;
- docs/cli.md lists every verb and option of both command lines;
- docs/development.md's module map has one row per sub-package and top-level module, with its
  layer, and names only modules that exist; docs/design.md's layer table is
  ``tests/test_layout.py``'s :data:`LAYERS`;
- docs/design.md holds the anchors the code cites, and its report columns, benchmark fields,
  format versions and run params are the code's;
- the version is one: ``__version__``, CITATION.cff, CHANGELOG.md and the README agree.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from tests.test_layout import LAYERS

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CHANGELOG = ROOT / "CHANGELOG.md"
DOCS = ROOT / "docs"
PAGES = [README, CHANGELOG, *sorted(DOCS.glob("*.md"))]
PACKAGES = ("featurestore", "experiments")
#: the README's size limit: details live in docs/ pages it links to
README_MAX_BYTES = 15_000
#: the anchors of docs/design.md that docstrings cite
DESIGN_ANCHORS = (
    "shard-layout",
    "frames-cache",
    "reports",
    "mlflow-runs",
    "benchmarks",
    "experiment-config",
    "layers",
)

FENCE = re.compile(r"^```.*?^```", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
CODE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def prose(text: str) -> str:
    """Markdown without fenced blocks and inline code (where a bracket is not a link)."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def section(page: Path, title: str) -> str:
    """The body of the level-2 section ``## title`` of ``page`` (up to the next level-2 heading)."""
    parts = re.split(r"^## ", page.read_text(encoding="utf-8"), flags=re.M)
    found = [p for p in parts if p.splitlines()[0].strip() == title]
    assert len(found) == 1, f"{page.name} has {len(found)} sections '## {title}'"
    return found[0]


def table_rows(text: str) -> list[list[str]]:
    """The cells of every Markdown table row of ``text`` (header and ``---`` rows left out)."""
    rows = []
    for line in text.splitlines():
        if line.startswith("|") and not re.match(r"^\|[-| ]+\|$", line):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows[1:] if rows else rows


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


# ------------------------------------------------------------------ links and the README
@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_points_to_an_existing_file_and_anchor(page: Path) -> None:
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


def test_every_docs_page_and_the_changelog_are_linked_from_the_readme() -> None:
    linked = {
        (ROOT / t.partition("#")[0]).resolve()
        for t in LINK.findall(prose(README.read_text(encoding="utf-8")))
    }
    orphans = [p.name for p in PAGES[1:] if p.resolve() not in linked]
    assert not orphans, f"pages the README does not link to: {orphans}"


def test_the_readme_stays_short() -> None:
    size = len(README.read_bytes())
    assert size <= README_MAX_BYTES, (
        f"README.md is {size} bytes, over {README_MAX_BYTES}: move details to a docs/ page and link it"
    )


def test_the_two_commands_open_the_readme() -> None:
    """``make demo`` and ``make test`` are the first thing a reader sees."""
    fence = FENCE.search(README.read_text(encoding="utf-8"))
    assert fence, "README.md has no code block"
    first_block = fence.group(0).splitlines()[1:-1]
    assert [line.split()[:2] for line in first_block] == [["make", "demo"], ["make", "test"]]


# ------------------------------------------------------------------ the command line
def _verbs(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {
        o for a in parser._actions for o in a.option_strings if o.startswith("--") and o != "--help"
    }


@pytest.mark.parametrize("program", PACKAGES)
def test_the_command_line_page_lists_every_verb_and_option(program: str) -> None:
    from importlib import import_module

    parser = import_module(f"{program}.cli").build_parser()
    text = section(DOCS / "cli.md", "Verbs and options")
    listed = set(re.findall(rf"^{program} (\w+)", text, re.M))
    verbs = _verbs(parser)
    assert set(verbs) - listed == set(), f"verbs of `{program}` missing from docs/cli.md"
    assert listed - set(verbs) == set(), f"docs/cli.md lists verbs `{program}` does not have"
    missing = {f"{program} {v} {o}" for v, p in verbs.items() for o in _options(p) if o not in text}
    assert not missing, f"options missing from docs/cli.md: {sorted(missing)}"


# ------------------------------------------------------------------ module map and layers
def _package_parts() -> set[str]:
    """Each package's sub-packages (``dir/``) and top-level modules, as paths from the root."""
    out = set()
    for package in PACKAGES:
        for p in (ROOT / package).iterdir():
            rel = p.relative_to(ROOT).as_posix()
            if p.suffix == ".py" and p.stem not in ("__init__", "__main__"):
                out.add(rel)
            elif p.is_dir() and (p / "__init__.py").exists():
                out.add(rel + "/")
    return out


def _module_map() -> dict[str, tuple[str, list[str]]]:
    """docs/development.md's module map: path -> (layer cell, key modules named)."""
    out: dict[str, tuple[str, list[str]]] = {}
    for cells in table_rows(section(DOCS / "development.md", "Module map")):
        code = CODE.match(cells[0])
        assert code, f"a module map row that does not start with a path: {cells}"
        path = code.group(1)
        assert path not in out, f"docs/development.md's module map has two rows for {path}"
        out[path] = (cells[1], [m for m in CODE.findall(cells[3]) if m.endswith(".py")])
    return out


def test_the_module_map_has_a_row_per_sub_package_and_nothing_that_does_not_exist() -> None:
    rows = _module_map()
    gone = sorted(
        p for p in rows if not (ROOT / p).exists() or (ROOT / p).is_dir() != p.endswith("/")
    )
    assert not gone, f"docs/development.md's module map names what does not exist: {gone}"
    missing = sorted(_package_parts() - set(rows))
    assert not missing, f"sub-packages or modules without a row in docs/development.md: {missing}"
    keys = sorted(
        f"{p}{m}" for p, (_, ms) in rows.items() for m in ms if not (ROOT / p / m).exists()
    )
    assert not keys, f"the module map's key modules that do not exist: {keys}"


def test_the_module_map_gives_each_layer_as_the_layout_test_enforces_it() -> None:
    wrong = []
    for path, (layer, _) in _module_map().items():
        package, name = path.split("/")[0], Path(path).stem
        want = LAYERS[package].get(name)
        if (str(want) if want is not None else "") != layer:
            wrong.append(f"{path}: {layer or 'none'}, tests/test_layout.py says {want}")
    assert not wrong, "docs/development.md's module map: " + "; ".join(wrong)


def test_the_design_layer_table_is_the_layout_tests() -> None:
    documented: dict[str, dict[str, int]] = {p: {} for p in PACKAGES}
    for rank, *cells in table_rows(section(DOCS / "design.md", "Layers")):
        for package, cell in zip(PACKAGES, cells, strict=True):
            documented[package].update({name: int(rank) for name in CODE.findall(cell)})
    assert documented == LAYERS, "update docs/design.md#layers to tests/test_layout.py's LAYERS"


# ------------------------------------------------------------------ docs/design.md
def test_design_has_the_anchors_the_code_cites() -> None:
    missing = set(DESIGN_ANCHORS) - anchors(DOCS / "design.md")
    assert not missing, f"docs/design.md lacks the sections {sorted(missing)}"


def _documented_columns(file_cell: str) -> list[str]:
    """The columns docs/design.md#reports lists for the row whose first cell is ``file_cell``,
    without the values given in parentheses."""
    rows = {cells[0]: cells[2] for cells in table_rows(section(DOCS / "design.md", "Reports"))}
    return CODE.findall(re.sub(r" \([^()]*\)", "", rows[file_cell]))


def _code_columns(module: str, name: str) -> list[str]:
    from importlib import import_module

    return list(getattr(import_module(module), name))


REPORT_COLUMNS = [
    ("`ablation.csv`", "experiments.studies.ablation", "COLUMNS"),
    ("`ablation.csv`, several targets", "experiments.studies.ablation", "TARGET_COLUMNS"),
    ("`ablation_comparisons.csv`", "experiments.studies.ablation", "COMPARISON_COLUMNS"),
    ("`ablation_unseen.csv`", "experiments.studies.unseen", "UNSEEN_COLUMNS"),
    ("`importance_<feature set>_<track>.csv`", "experiments.evaluation.importance", "COLUMNS"),
    ("`agreement.csv`", "experiments.studies.agreement", "COLUMNS"),
    ("`inter_rater.csv`", "experiments.studies.inter_rater", "RATER_COLUMNS"),
]


@pytest.mark.parametrize(("file_cell", "module", "name"), REPORT_COLUMNS)
def test_design_lists_each_reports_columns_in_the_codes_order(
    file_cell: str, module: str, name: str
) -> None:
    assert _documented_columns(file_cell) == _code_columns(module, name), (
        f"docs/design.md#reports, {file_cell}: the columns differ from {module}.{name}"
    )


def test_design_lists_the_ccc_matrix_columns() -> None:
    from experiments.evaluation.evaluate import session_scores

    assert _documented_columns("`ccc_matrix.csv`") == list(session_scores([]).columns)


def test_design_lists_the_benchmark_record_fields() -> None:
    from bench.harness import FIELDS

    rows = table_rows(section(DOCS / "design.md", "Benchmarks"))
    fields = [m.group(1) for c in rows if (m := CODE.match(c[0]))]
    assert fields[: len(FIELDS)] == list(FIELDS), (
        "docs/design.md#benchmarks: bench/harness.py FIELDS"
    )


def test_design_states_the_current_format_versions() -> None:
    from experiments.data.frames_cache import FRAMES_VERSION
    from featurestore.storage.shard import SCHEMA_VERSION

    text = (DOCS / "design.md").read_text(encoding="utf-8")
    assert f"`SCHEMA_VERSION` ({SCHEMA_VERSION})" in text
    assert f"`FRAMES_VERSION` ({FRAMES_VERSION})" in text


def test_design_names_every_param_a_child_run_logs() -> None:
    from experiments.config import expand
    from experiments.config.loading import load_config

    configs = [load_config(name) for name in ("smoke", "default", "causal", "ablation")]
    configs.append(
        load_config(
            "smoke",
            overrides=[
                "protocol=kfold_person",
                "personalization=[global]",
                "gold_standard={method: mean}",
            ],
        )
    )
    logged = {
        "model.<hyperparameter>" if k.startswith("model.") and k != "model.name" else k
        for cfg in configs
        for trial in expand(cfg)
        for k in trial.params()
    }
    rows = table_rows(section(DOCS / "design.md", "MLflow runs"))
    documented = set(CODE.findall(next(c[2] for c in rows if c[:2] == ["child", "params"])))
    assert logged - documented == set(), "child-run params missing from docs/design.md#mlflow-runs"


# ------------------------------------------------------------------ one version
def test_the_version_is_one_everywhere() -> None:
    """``__version__`` is written once; setup.cfg reads it, CITATION.cff, the changelog's newest
    entry and the README name it."""
    import yaml

    import featurestore

    version = featurestore.__version__
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text(encoding="utf-8"))
    assert cff["cff-version"] == "1.2.0" and cff["license"] == "MIT"
    assert str(cff["version"]) == version, "update CITATION.cff's version"
    assert "version = attr: featurestore.__version__" in (ROOT / "setup.cfg").read_text()
    newest = re.search(r"^## (\S+)", CHANGELOG.read_text(encoding="utf-8"), re.M)
    assert newest and newest.group(1) == version, "CHANGELOG.md's newest entry is another version"
    assert f"omg-empathy-bench {version}" in README.read_text(encoding="utf-8")
