"""The repository explains itself: nothing in it points at a document it does not hold.

Every tracked text file (and every untracked one that is not ignored) is searched for references to
documents outside the repository: the design notes and behaviour specification the project started
from, its numbered source documents, and paths into the folder that held them. Each finding is
reported as ``file:line``. The patterns are built from pieces, so this file does not match itself.

Every relative Markdown link of README.md and docs/*.md must point at a file inside the repository,
and a link's ``#anchor`` at a heading of that page.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT

SECTION_SIGN = "\u00a7"
DESIGN_NOTES = "ARCHITECTURE" + r"\.md"
SHARED = "shared" + "/"

OUTSIDE_REFERENCES: dict[str, re.Pattern[str]] = {
    "the design notes": re.compile(DESIGN_NOTES),
    "a section of the behaviour spec": re.compile(r"\bspec\s*" + SECTION_SIGN, re.IGNORECASE),
    "a section number of the behaviour spec": re.compile(SECTION_SIGN + r"[a-h](?:\.\d+|\b)"),
    "the behaviour spec's file": re.compile("dsh-" + "behaviour-spec"),
    "a seed document": re.compile(r"\bseeds?\s+0{2}\d", re.IGNORECASE),
    "a path into the shared folder": re.compile(
        r"\.\./" + SHARED + "|" + r"\b" + SHARED + r"(?:design|reference|seeds|data|hooks)/"
    ),
}
"""What a sentence may not cite: each names a document that lives outside the repository."""

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


# ---------------------------------------------------------------- the files of the repository


def _git_files(*args: str) -> list[str]:
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", *args],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return [name for name in listed.stdout.split("\0") if name]


def repository_files() -> list[Path]:
    """Tracked files, plus untracked ones git does not ignore, that exist in the working tree."""
    names = {*_git_files(), *_git_files("--others", "--exclude-standard")}
    return sorted(path for name in names if (path := ROOT / name).is_file())


def text_of(path: Path) -> str | None:
    """The file's text, or None for a binary file."""
    data = path.read_bytes()
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def outside_references(text: str) -> Iterator[tuple[int, str, str]]:
    """(line, what it cites, the matched text) for every reference to a document outside."""
    for what, pattern in OUTSIDE_REFERENCES.items():
        for match in pattern.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            yield line, what, " ".join(match.group().split())


def findings(paths: list[Path]) -> list[str]:
    found: list[str] = []
    for path in paths:
        text = text_of(path)
        if text is None:
            continue
        where = path.relative_to(ROOT).as_posix()
        found += [f"{where}:{line}: {what} ({hit!r})" for line, what, hit in outside_references(text)]
    return sorted(found)


def test_the_file_list_covers_the_repository() -> None:
    files = {path.relative_to(ROOT).as_posix() for path in repository_files()}
    assert {"README.md", "docs/architecture.md", "compaction/engine/transaction.py"} <= files
    assert "tests/test_self_contained.py" in files
    assert not [name for name in files if name.startswith((".venv/", ".git/"))]


def test_no_file_refers_to_a_document_outside_the_repository() -> None:
    found = findings(repository_files())
    assert not found, "references to documents outside the repository:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "sentence",
    [
        "see " + "ARCHITECTURE" + ".md for the layers",
        "the lock (spec " + SECTION_SIGN + "d.14)",
        "the lock (Spec\n" + SECTION_SIGN + "d.14)",
        "closers of " + SECTION_SIGN + "d.16",
        "balance (" + SECTION_SIGN + "c)",
        "the reference (`dsh-" + "behaviour-spec.md`)",
        "checkpoint rebuild (seed " + "002)",
        "seeds " + "000, 001",
        "read ../" + SHARED + "notes.md",
        "the transcripts under " + SHARED + "data/transcripts",
    ],
)
def test_each_kind_of_outside_reference_is_caught(sentence: str) -> None:
    assert list(outside_references(sentence)), sentence


@pytest.mark.parametrize(
    "sentence",
    [
        "a shared/ui folder of the agent's project",
        "the store is shared by every worker",
        "/usr/share/doc/python3",
        "msgspec's decoder",
        "for spec in SUMMARIZERS",
        "python -m tests.reliability.soak --seed 1",
        "random seed 42",
    ],
)
def test_ordinary_words_are_not_flagged(sentence: str) -> None:
    assert not list(outside_references(sentence)), sentence


def test_a_finding_names_its_file_and_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    page = tmp_path / "notes.md"
    page.write_text("first line\nsecond (spec " + SECTION_SIGN + "b.2)\n", encoding="utf-8")
    (tmp_path / "blob.bin").write_bytes(b"\0seed " + b"001")
    assert findings([page, tmp_path / "blob.bin"]) == [
        "notes.md:2: a section number of the behaviour spec ('" + SECTION_SIGN + "b.2')",
        "notes.md:2: a section of the behaviour spec ('spec " + SECTION_SIGN + "')",
    ]


# ---------------------------------------------------------------- links of the README and docs/


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The anchors of a page's headings (outside code fences; repeated headings get -1, -2, ...)."""
    seen: dict[str, int] = {}
    found: set[str] = set()
    for line in prose_lines(page):
        heading = HEADING.match(line[1])
        if heading is None:
            continue
        base = slug(heading.group(1))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def prose_lines(page: Path) -> Iterator[tuple[int, str]]:
    """(number, line) of the lines outside code fences."""
    fenced = False
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield number, line


def broken_links(page: Path) -> list[str]:
    broken: list[str] = []
    where = page.relative_to(ROOT).as_posix()
    for number, line in prose_lines(page):
        for target in LINK.findall(line):
            if re.match(r"[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
                continue  # http:, https:, mailto:
            problem = link_problem(page, target)
            if problem:
                broken.append(f"{where}:{number}: {target} ({problem})")
    return broken


def link_problem(page: Path, target: str) -> str | None:
    path_part, _, anchor = target.partition("#")
    linked = (page.parent / path_part).resolve() if path_part else page
    if not linked.is_relative_to(ROOT):
        return "outside the repository"
    if not linked.exists():
        return "no such file"
    if anchor and linked.suffix == ".md" and anchor not in anchors(linked):
        return f"no heading #{anchor} in {linked.relative_to(ROOT).as_posix()}"
    return None


def test_the_pages_have_links() -> None:
    assert len([t for page in PAGES for _, line in prose_lines(page) for t in LINK.findall(line)]) >= 40


def test_every_relative_link_of_the_readme_and_docs_resolves() -> None:
    broken = [problem for page in PAGES for problem in broken_links(page)]
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_a_broken_link_is_caught(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tmp_path = tmp_path.resolve()
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "there.md").write_text("# Where it is\n\n## Two words\n", encoding="utf-8")
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "[ok](there.md#two-words) [site](https://example.com) [self](#a-page)\n"
        "# A page\n"
        "[gone](missing.md) [out](../../elsewhere.md) [anchor](there.md#nowhere)\n"
        "```\n[in a fence](missing.md)\n```\n",
        encoding="utf-8",
    )
    assert [b.split(" (")[0] for b in broken_links(page)] == [
        "docs/page.md:3: missing.md",
        "docs/page.md:3: ../../elsewhere.md",
        "docs/page.md:3: there.md#nowhere",
    ]
