"""The README's and the guides' code runs as written, and what it names exists.

The README is one screen (what it is, install with every extra, a quickstart that
fails and recovers, the two commands, links to every guide); the core topics are
guides in docs/, each listed in docs/index.md and in mkdocs.yml's nav.

Every ```python block of README.md, and of each guide in docs/ (not docs/api/,
the reference, which has no code of its own), runs: a page's blocks in order, in
one namespace (as a reader pasting them into one session would), in a temporary
directory. A block marked ``<!-- readme-test: postgres -->`` needs a Postgres
server: it runs, with ``DSN`` set, in the Postgres test (skipped without a
server, failed under ``CI=true``). ``<!-- readme-test: skip REASON -->`` leaves a
block out, and must say why.
"""

from __future__ import annotations

import dataclasses
import re
import traceback
from pathlib import Path
from typing import Any

import pytest

from langgraph_resilience.checkpoint import RunRecord

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()
#: The guides: every page of docs/ but the reference (docs/api/).
GUIDES = sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))
#: The pages whose code runs: the README and every guide.
PAGES = ["README.md", *GUIDES]
#: The guides the README's core topics moved to, and the least Python blocks each
#: holds (the tour is the README's old tour, eight steps).
CORE = {
    "docs/tour.md": 8,
    "docs/failure-model.md": 1,
    "docs/side-effects.md": 1,
    "docs/workers.md": 2,
    "docs/savers.md": 2,
}
#: The README's length, at most: one screen, with the extras table and the quickstart.
README_LINES = 300

_BLOCK = re.compile(
    r"(?:<!-- readme-test: (?P<mark>[a-z]+)(?P<reason>[^>]*)-->\n)?```python\n(?P<code>.*?)^```",
    re.DOTALL | re.MULTILINE,
)


@dataclasses.dataclass(frozen=True, kw_only=True)
class Block:
    line: int
    mark: str | None
    reason: str
    code: str


def _blocks(page: str = "README.md") -> list[Block]:
    text = (ROOT / page).read_text()
    return [
        Block(
            line=text.count("\n", 0, m.start("code")) + 1,
            mark=m.group("mark"),
            reason=(m.group("reason") or "").strip(),
            code=m.group("code"),
        )
        for m in _BLOCK.finditer(text)
    ]


def _run(blocks: list[Block], namespace: dict[str, Any], page: str = "README.md") -> None:
    for block in blocks:
        try:
            exec(compile(block.code, f"{page}:{block.line}", "exec"), namespace)
        except Exception as exc:
            detail = "".join(traceback.format_exception(exc))
            pytest.fail(f"the {page} block at line {block.line} failed:\n{detail}")


@pytest.mark.parametrize("page", PAGES)
def test_every_block_is_run_or_says_why_not(page: str) -> None:
    blocks = _blocks(page)
    if page == "README.md":
        assert len(blocks) >= 1, "the README's quickstart was not found"
    if page in CORE:
        assert len(blocks) >= CORE[page], f"{page}: its Python blocks were not found"
    text = (ROOT / page).read_text()
    assert text.count("```python") == len(blocks), "a marker the test does not read"
    for block in blocks:
        assert block.mark in (None, "postgres", "skip"), f"line {block.line}: {block.mark}"
        if block.mark == "skip":
            assert block.reason, f"line {block.line}: a skipped block must say why"


@pytest.mark.parametrize("page", PAGES)
def test_every_fence_opens_with_a_language_and_closes_bare(page: str) -> None:
    """A stray fence turns the rest of the page into one code block (and hides
    the blocks after it from this test)."""
    fences = [line for line in (ROOT / page).read_text().splitlines() if line.startswith("```")]
    opening = fences[0::2]
    closing = fences[1::2]
    assert len(opening) == len(closing), "a fence is not closed"
    assert [f for f in opening if f == "```"] == [], "a block without a language"
    assert [f for f in closing if f != "```"] == [], "a fence out of place"


def _namespace(page: str) -> dict[str, Any]:
    return {"__name__": "readme" if page == "README.md" else Path(page).stem}


@pytest.mark.parametrize("page", PAGES)
def test_the_python_blocks_run(page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    _run([b for b in _blocks(page) if b.mark is None], _namespace(page), page)


@pytest.mark.parametrize(
    "page", [p for p in PAGES if any(b.mark == "postgres" for b in _blocks(p))]
)
def test_the_python_blocks_run_on_postgres(
    page: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pg_dsn: str
) -> None:
    monkeypatch.chdir(tmp_path)
    namespace = {**_namespace(page), "DSN": pg_dsn}
    try:
        _run([b for b in _blocks(page) if b.mark in (None, "postgres")], namespace, page)
    finally:
        pool = namespace.get("pool")
        if pool is not None:
            pool.close()


def _links(text: str) -> list[str]:
    """The relative link targets of a page, without their anchors."""
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    return [t for t in targets if not t.startswith(("http://", "https://", "mailto:"))]


def test_the_files_the_readme_links_exist() -> None:
    local = _links(README)
    assert local, "no relative link found"
    assert [t for t in local if not (ROOT / t).exists()] == []


def test_the_readme_is_one_screen_and_links_every_guide() -> None:
    lines = len(README.splitlines())
    assert lines <= README_LINES, f"README.md has {lines} lines, at most {README_LINES}"
    assert sorted(set(GUIDES) - set(_links(README))) == [], "guides the README does not link"
    assert set(CORE) <= set(GUIDES), "a core topic's guide is missing"


def test_every_guide_is_linked_from_the_index_and_in_the_nav() -> None:
    index = (ROOT / "docs" / "index.md").read_text()
    linked = {f"docs/{t}" for t in _links(index)}
    guides = set(GUIDES) - {"docs/index.md"}
    assert sorted(guides - linked) == [], "guides docs/index.md does not list"
    nav = set(re.findall(r"^\s+- (?:[^:\n]+: )?([\w./-]+\.md)$", _mkdocs_nav(), re.MULTILINE))
    assert sorted({g.removeprefix("docs/") for g in GUIDES} - nav) == [], "not in mkdocs.yml's nav"


def _mkdocs_nav() -> str:
    text = (ROOT / "mkdocs.yml").read_text()
    nav = text[text.index("\nnav:\n") :]
    return nav[: nav.index("\n\n")]


def _extras() -> set[str]:
    """The extras pyproject.toml declares (read without tomllib, which 3.10 lacks)."""
    text = (ROOT / "pyproject.toml").read_text()
    section = text.split("[project.optional-dependencies]\n", 1)[1].split("\n[", 1)[0]
    return set(re.findall(r"^([A-Za-z][\w-]*) = \[", section, re.MULTILINE))


def test_the_extras_table_names_every_extra() -> None:
    table = README[README.index("| extra | adds | for |") :]
    table = table[: table.index("\n\n")]
    rows = set(re.findall(r"^\| `([\w-]+)` \|", table, re.MULTILINE))
    extras = _extras()
    assert {"postgres", "console", "dev"} <= extras, extras  # the parse found them
    assert rows == extras, f"extras without a row: {extras - rows}; rows of none: {rows - extras}"


def test_the_run_record_fields_named_are_the_codes() -> None:
    workers = (ROOT / "docs" / "workers.md").read_text()
    section = workers[workers.index("`saver.read_run(run_id)` returns a `RunRecord`") :]
    section = section[: section.index("\n\n")]
    named = set(re.findall(r"`(\w+)`", section))
    fields = {f.name for f in dataclasses.fields(RunRecord)}
    assert fields - named == set(), "RunRecord fields docs/workers.md does not name"


def test_the_two_commands_are_the_makefiles() -> None:
    makefile = (ROOT / "Makefile").read_text()
    for target in ("demo", "test", "docs"):
        assert re.search(rf"^{target}: ", makefile, re.MULTILINE), target
        assert f"make {target}" in README
