"""The documents users read: every relative link resolves, code and top-level documents say
what the code does (no tracker numbers, no file names of papers that are not in the
repository), and the snippets of docs/python-api.md run as written."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TOP_LEVEL = [ROOT / "README.md", ROOT / "BENCHMARKS.md", ROOT / "RELIABILITY.md"]
DOCUMENTS = TOP_LEVEL + sorted((ROOT / "docs").rglob("*.md"))
CODE_DIRS = ["controller", "dataplane", "tests", "p4src", "topologies", "mininet"]
CODE_SUFFIXES = {".py", ".p4", ".yaml", ".yml", ".md", ".txt", ".toml", ".cfg"}

FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[[^\]\n]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
# A tracker reference ("issue 12", "Issue #3", "#15") says which ticket asked, not what the
# code does; hex colours and markdown headings are not numbers after a lone '#'.
TRACKER = re.compile(r"\bissues?\s*#?\d|(?<![\w&#])#\d{1,4}\b", re.IGNORECASE)
# The papers' text files live outside the repository; cite a paper by its title.
PAPER_FILE = re.compile(r"\b(aro|eina|atro|grid|paring)-[a-z-]+\.txt\b")


# A top-level document opens with a one-screen summary and stays "a few hundred lines":
# journals, per-run detail and history live in docs/.
LINE_BUDGET = {"README.md": 350, "BENCHMARKS.md": 250, "RELIABILITY.md": 250}


def relative_links(text: str, anchors: bool = False) -> list[str]:
    """Link targets outside code blocks and code spans that point into the repository
    (with `anchors`, each with its '#fragment', and the same file's own '#fragment' links)."""
    text = INLINE_CODE.sub("", FENCE.sub("", text))
    targets = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
            continue  # http:, https:, mailto:
        if anchors:
            targets.append(target)
        elif not target.startswith("#"):  # an anchor in the same file
            targets.append(target.split("#", 1)[0])
    return targets


def heading_anchors(path: Path) -> set[str]:
    """The anchors GitHub gives a markdown file's headings: lower case, spaces to hyphens,
    punctuation other than hyphens and underscores dropped; a repeated heading gets -1, -2."""
    seen: dict[str, int] = {}
    for line in FENCE.sub("", path.read_text()).splitlines():
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading[1].lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
    return {s if k == 0 else f"{s}-{k}" for s, n in seen.items() for k in range(n)}


def broken_links(path: Path) -> list[str]:
    """Targets that do not exist, and '#fragments' no heading of a markdown target gives."""
    broken = []
    for target in relative_links(path.read_text(), anchors=True):
        name, _, fragment = target.partition("#")
        file = path.parent / name if name else path
        if not file.exists() or (
            fragment and file.suffix == ".md" and fragment not in heading_anchors(file)
        ):
            broken.append(target)
    return broken


@pytest.mark.parametrize("path", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_points_to_a_file_that_exists(path: Path) -> None:
    assert broken_links(path) == []


def test_the_link_check_finds_a_broken_link_and_ignores_code(tmp_path: Path) -> None:
    (tmp_path / "there.png").write_bytes(b"")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "# A\n[ok](there.png) ![pic](there.png#x) [web](https://example.org) [top](#a)\n"
        "[gone](missing/file.json) `[code](nowhere.md)`\n"
        "```\n[block](nowhere.md)\n```\n"
    )
    assert broken_links(doc) == ["missing/file.json"]


def test_the_link_check_finds_an_anchor_no_heading_gives(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text(
        "# Top\n## 3. Controller failover\n## Runs\n## Runs\n```\n# not a heading\n```\n"
    )
    doc = tmp_path / "doc.md"
    doc.write_text(
        "## What `optimal` guarantees\n[a](other.md#3-controller-failover) "
        "[b](other.md#runs-1) [c](#what-optimal-guarantees) [d](other.md#runs-2) "
        "[e](#nowhere) [f](other.md#not-a-heading)\n"
    )
    assert broken_links(doc) == ["other.md#runs-2", "#nowhere", "other.md#not-a-heading"]


@pytest.mark.parametrize("name", sorted(LINE_BUDGET))
def test_a_top_level_document_fits_its_line_budget(name: str) -> None:
    lines = len((ROOT / name).read_text().splitlines())
    assert lines <= LINE_BUDGET[name], f"{name}: {lines} lines, budget {LINE_BUDGET[name]}"


def _code_files() -> list[Path]:
    files = []
    for folder in CODE_DIRS:
        for dirpath, dirnames, filenames in os.walk(ROOT / folder):
            dirnames[:] = [d for d in dirnames if d not in {"__pycache__", "build"}]
            files += [Path(dirpath) / f for f in filenames if Path(f).suffix in CODE_SUFFIXES]
    return sorted(set(files) - {Path(__file__).resolve()})  # this file names what it looks for


def _offending_lines(pattern: re.Pattern[str], files: list[Path]) -> list[str]:
    hits = []
    for path in files:
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if pattern.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    return hits


def test_code_and_top_level_documents_name_no_tracker_issue() -> None:
    assert _offending_lines(TRACKER, _code_files() + TOP_LEVEL) == []


def test_papers_are_cited_by_title_not_by_a_file_outside_the_repository() -> None:
    assert _offending_lines(PAPER_FILE, _code_files() + DOCUMENTS) == []


def test_the_checks_see_what_they_look_for() -> None:
    for line in ["see issue 15", "(Issue #3)", "fixed in #12.", "issues 4 and 5"]:
        assert TRACKER.search(line), line
    for line in ['color="#333333"', "## Section", "port 3", "&#12;", "the issue's size"]:
        assert not TRACKER.search(line), line
    assert PAPER_FILE.search("EINA (eina-edge-ina-routing.txt)")


def _snippets() -> list[str]:
    text = (ROOT / "docs" / "python-api.md").read_text()
    return re.findall(r"^```python\n(.*?)^```", text, re.MULTILINE | re.DOTALL)


def test_the_python_api_snippets_run_as_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each snippet runs from the repository root, after the ones before it, as a reader
    pasting them into one interpreter would run them."""
    snippets = _snippets()
    joined = "\n".join(snippets)
    for name in ["load_topology", "solve", "SolveOptions", "evaluate", "compile_plan"]:
        assert name in joined
    monkeypatch.chdir(ROOT)
    namespace: dict[str, object] = {"__name__": "__python_api__"}
    for number, code in enumerate(snippets, 1):
        snippet = compile(code, f"docs/python-api.md, snippet {number}", "exec")
        exec(snippet, namespace)
