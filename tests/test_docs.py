"""The method pages (docs/*.md) and the READMEs: line links that hold, the README's limits, no citation of
files a reader of the repository does not have."""
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PAGES = sorted((ROOT / "docs").glob("*.md"))
# a line link: [seakr.py:93 eigen_score](../seakr.py#L93): the file, the line, the name it holds
LINK = re.compile(r"\[([\w/]+\.py):(\d+) (\w+)\]\(([^)#]*)#L(\d+)\)")
ANY_LINE_LINK = re.compile(r"\[[\w/]+\.py:\d+[^\]]*\]\(")


def defines(line: str, name: str) -> bool:
    """The line defines `name`: `def name`, `class name`, or `name =` / `name: T =` at its start."""
    return re.match(rf"(?:def {name}\b|class {name}\b|{name}\s*[:=])", line) is not None


def line_links(text: str):
    return [(m[1], int(m[2]), m[3], m[4], int(m[5])) for m in LINK.finditer(text)]


def test_the_three_pages_have_their_sections():
    assert {p.name for p in PAGES} >= {"seakr.md", "ctrla.md", "rowen.md"}
    for name in ("seakr.md", "ctrla.md", "rowen.md"):
        text = (ROOT / "docs" / name).read_text()
        for section in ("## The method", "## Usage", "## Implementation details", "## Results", "## At paper scale",
                        "### Changes results", "### Infrastructure (same results)", "### Presentation"):
            assert section in text, (name, section)
        assert "| paper |" in text and len(line_links(text)) >= 20, name


@pytest.mark.parametrize("page", PAGES + [ROOT / "README.md"], ids=lambda p: p.name)
def test_every_line_link_holds_the_named_definition(page):
    text = page.read_text()
    links = line_links(text)
    # every link to a line of a project file follows the checkable form "FILE.py:LINE NAME"
    assert len(ANY_LINE_LINK.findall(text)) == len(links), "a line link without a name"
    for file, line, name, target, anchor in links:
        assert line == anchor, (file, line, anchor)
        assert (page.parent / target).resolve() == (ROOT / file).resolve(), (target, file)
        lines = (ROOT / file).read_text().splitlines()
        assert 0 < line <= len(lines) and defines(lines[line - 1], name), \
            f"{page.name}: {file}:{line} does not hold {name} (it is at " \
            f"{[i + 1 for i, x in enumerate(lines) if defines(x, name)]})"


def test_line_link_check_can_fail(tmp_path):
    assert defines("def eigen_score(hidden):", "eigen_score") and defines("K_SAMPLES = 20", "K_SAMPLES")
    assert not defines("def eigen_scores(h):", "eigen_score") and not defines("    x = eigen_score(h)", "eigen_score")
    assert line_links("[seakr.py:12 call](../seakr.py#L12)") == [("seakr.py", 12, "call", "../seakr.py", 12)]


def test_every_test_a_page_cites_exists():
    names = set()
    for path in (ROOT / "tests").glob("test_*.py"):
        names |= set(re.findall(r"^def (test_\w+)", path.read_text(), re.M))
    for page in PAGES:
        for cited in re.findall(r"`(test_\w+)`", page.read_text()):
            assert cited in names, (page.name, cited)


def test_the_readme_reads_in_one_sitting():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    hashes = set(re.findall(r"(?<![\w/.-])[0-9a-f]{7,40}(?![\w.-])", text))
    hashes = {h for h in hashes if re.search(r"[a-f]", h) and re.search(r"\d", h)}
    assert len(hashes) <= 3, hashes
    for command in ("make demo", "make test"):
        assert command in text.split("## Quickstart")[1].split("\n## ")[0]
    for target in ("docs/seakr.md", "docs/ctrla.md", "docs/rowen.md", "results/README.md",
                   "benchmarks/README.md", "tests/README.md"):
        assert f"]({target})" in text, target
    found = text.split("## What we found")[1].split("\n## ")[0].strip().splitlines()
    assert sum(1 for line in found if line.strip()) <= 12
    assert sum(1 for line in found if line.startswith("![")) == 1


def test_no_file_cites_shared():
    """A reader of the repository has no shared/ folder: no method, page or README cites one."""
    files = list(ROOT.glob("*.py")) + [ROOT / "README.md"] + PAGES
    for path in files:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            assert not re.search(r"(?<![\w_])(\.\./)?shared/", line), f"{path.name}:{number}: {line.strip()}"


def where(file: str, name: str) -> list[int]:
    """The lines of a project file that define `name`."""
    return [i + 1 for i, line in enumerate((ROOT / file).read_text().splitlines()) if defines(line, name)]


def relinked(text: str) -> str:
    """Each line link moved to the line that defines its name now (the name is the link's own text)."""
    def move(m):
        found = where(m[1], m[3])
        line = found[0] if len(found) == 1 else int(m[2])
        return f"[{m[1]}:{line} {m[3]}]({m[4]}#L{line})"
    return LINK.sub(move, text)


def test_relinking_moves_a_link_to_its_name():
    line = where("seakr.py", "eigen_score")[0]
    assert relinked("[seakr.py:1 eigen_score](../seakr.py#L1)") == f"[seakr.py:{line} eigen_score](../seakr.py#L{line})"


if __name__ == "__main__":      # python tests/test_docs.py: move every page's line links after an edit moved code
    for page in PAGES + [ROOT / "README.md"]:
        text = page.read_text()
        if relinked(text) != text:
            page.write_text(relinked(text))
            print("relinked", page.relative_to(ROOT))
