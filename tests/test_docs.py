"""The documentation stays true to the code and readable by users: fast checks, no training.

Why these: docs/cli.md is generated from the parser, so a flag added without regenerating it must fail
here; the README is a user's first screen, so it stays short and its links resolve; and notes about
how a figure was produced on one development machine (session history, machine-local paths) belong
nowhere in the published docs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gnnscale.cli import reference as cli_reference

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
README_LIMIT_BYTES = 15_000

# Words of a lab notebook and paths of one machine: a user can neither read the history nor run the path.
FORBIDDEN = re.compile(r"this session|previous session|earlier session|issue \d|/work/|/root/|bench\.lock",
                       re.IGNORECASE)

# A markdown link or image target: ](target) or ](target "title").
LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def published_docs() -> list[Path]:
    """Every document a user reads: the README, the benchmarks' README and the design notes."""
    return [README, ROOT / "benchmarks" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def forbidden_lines(text: str) -> list[str]:
    """Lines of ``text`` that match FORBIDDEN, numbered from 1, for a message that points at them."""
    return [f"{n}: {line.strip()}" for n, line in enumerate(text.splitlines(), 1) if FORBIDDEN.search(line)]


def relative_links(text: str) -> list[tuple[str, str]]:
    """(path, anchor) of every link that points into the checkout: not http(s), mailto or in-page. Fenced code
    blocks hold code (``emb[t](ids)`` is a call), not links."""
    links = []
    for target in LINK.findall(re.sub(r"^\s*```.*?^\s*```", "", text, flags=re.S | re.M)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.IGNORECASE) or target.startswith("#"):
            continue
        path, _, anchor = target.partition("#")
        links.append((path, anchor))
    return links


def heading_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a file's headings: lower case, punctuation dropped, spaces to hyphens.

    Headings inside fenced code blocks are comments of shell snippets, not headings.
    """
    anchors, fenced = set(), False
    for line in markdown.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (match := re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)):
            anchors.add(re.sub(r"[^\w\- ]", "", match.group(1).lower()).replace(" ", "-"))
    return anchors


def broken_links(text: str, base: Path) -> list[str]:
    """Links of ``text`` (a file in ``base``) whose file is missing, or whose anchor no heading has."""
    broken = []
    for path, anchor in relative_links(text):
        target = (base / path).resolve()
        if not target.exists():
            broken.append(f"{path} (no such file)")
        elif anchor and target.suffix == ".md" and anchor not in heading_anchors(target.read_text(encoding="utf-8")):
            broken.append(f"{path}#{anchor} (no such heading)")
    return broken


def test_cli_reference_is_current() -> None:
    expected = cli_reference.markdown()
    actual = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert actual == expected, ("docs/cli.md is stale: regenerate it with "
                                f"`{cli_reference.REGENERATE}`")


def test_cli_reference_covers_every_subcommand_and_option() -> None:
    text = cli_reference.markdown()
    for name, (_, sub) in cli_reference.subcommands(cli_reference.build_parser()).items():
        assert f"## `gnnscale {name}`" in text
        for action in cli_reference.option_actions(sub):
            assert f"`{action.option_strings[0]}" in text, f"{name}: {action.option_strings[0]} not documented"
    assert "| `-h" not in text and "| `--help" not in text, "-h/--help is argparse's, not an option to document"


def test_readme_is_short() -> None:
    size = README.stat().st_size
    assert size < README_LIMIT_BYTES, (f"README.md is {size:,} bytes (limit {README_LIMIT_BYTES:,}): move "
                                       "measurement details to benchmarks/README.md and design to docs/")


@pytest.mark.parametrize("path", published_docs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_notebook_words_or_machine_paths(path: Path) -> None:
    found = forbidden_lines(path.read_text(encoding="utf-8"))
    assert not found, f"{path.relative_to(ROOT)} reads as a lab notebook or names one machine's paths:\n" \
                      + "\n".join(found)


def test_readme_links_resolve() -> None:
    text = README.read_text(encoding="utf-8")
    assert relative_links(text), "README.md links nothing: the link check would pass vacuously"
    broken = broken_links(text, ROOT)
    assert not broken, f"README.md has links that point nowhere in the checkout: {broken}"


@pytest.mark.parametrize("path", sorted((ROOT / "docs").glob("*.md")), ids=lambda p: str(p.relative_to(ROOT)))
def test_docs_links_resolve(path: Path) -> None:
    broken = broken_links(path.read_text(encoding="utf-8"), path.parent)
    assert not broken, f"{path.relative_to(ROOT)} has links that point nowhere: {broken}"


def test_helpers_catch_what_they_should() -> None:
    """The checks above pass on good docs; this shows they would fail on bad ones."""
    assert forbidden_lines("measured in this Session\nfine\nsee Issue 7\n`flock /work/bench.lock`") == [
        "1: measured in this Session", "3: see Issue 7", "4: `flock /work/bench.lock`"]
    assert forbidden_lines("measured on a 2-core machine with nothing else running") == []
    text = "[a](docs/cli.md) [b](https://x.org/y) [c](#top) [d](benchmarks/README.md#split \"t\") ![e](f.png)"
    assert relative_links(text) == [("docs/cli.md", ""), ("benchmarks/README.md", "split"), ("f.png", "")]
    assert heading_anchors("# A b\n```\n# not a heading\n```\n## end_to_end.py: vs DGL 2.1\n") == {
        "a-b", "end_to_endpy-vs-dgl-21"}
    assert broken_links("[x](README.md#no-such-heading) [y](no/such/file.md) [z](docs/cli.md)", ROOT) == [
        "README.md#no-such-heading (no such heading)", "no/such/file.md (no such file)"]
