"""The README is a short entry point whose commands are the ones the project runs.

It keeps the two commands the project promises (one that sets everything up and runs the
demo, one that runs the tests), the test command is exactly what CI (`.ci/run`) runs, and it
stays short: the rest of the documentation is the MkDocs site under `docs/`.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
MAX_LINES = 250


def _code_lines(markdown: str) -> list[str]:
    """Every line inside a fenced code block."""
    lines, inside = [], False
    for line in markdown.splitlines():
        if line.startswith("```"):
            inside = not inside
        elif inside:
            lines.append(line.strip())
    return lines


def test_the_readme_is_at_most_250_lines() -> None:
    assert len(README.splitlines()) <= MAX_LINES, f"README.md has {len(README.splitlines())} lines"


def test_the_readme_test_command_is_the_one_ci_runs() -> None:
    ci_command = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()[-1]
    assert ci_command.startswith("pip install torch"), ".ci/run's last line should be the test command"
    assert ci_command in _code_lines(README), "README.md's test command differs from .ci/run's"
    assert "mkdocs build --strict" in ci_command


def test_the_readme_sets_up_and_runs_the_demo_in_one_command() -> None:
    assert "pip install torch==2.13.0 && pip install -e '.[all]' && trajlake demo" in _code_lines(README)


def test_the_site_configuration_is_at_the_root_and_names_the_hook() -> None:
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert (
        "docs/hooks/trajlake_docs.py" in config and (ROOT / "docs" / "hooks" / "trajlake_docs.py").is_file()
    )


def test_every_relative_link_of_the_readme_names_a_file_and_heading_that_exist() -> None:
    import re

    for target in re.findall(r"\]\(([^)\s]+)\)", README):
        if target.startswith(("http://", "https://", "#")):
            continue
        path, _, anchor = target.partition("#")
        assert (ROOT / path).is_file(), f"README.md links to {target}: no such file"
        if anchor:
            headings = [
                re.sub(r"[^\w\- ]", "", line.lstrip("#").strip().lower()).replace(" ", "-")
                for line in (ROOT / path).read_text(encoding="utf-8").splitlines()
                if line.startswith("#")
            ]
            assert anchor in headings, f"README.md links to {target}: {path} has no such heading"
