"""The front door and the manual: the README's two commands are what CI runs, the command-line
reference is generated from the real parsers, and links to repository files are checked."""

from __future__ import annotations

import argparse
import logging
import os
import re
import runpy
import subprocess
import sys
from types import SimpleNamespace

import pytest
from tests_paths import REPO

from kernelblaster.cli import COMMANDS, build_parser

README = REPO / "README.md"
HOOKS = REPO / "tools" / "docs"


def _bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, re.S)


def test_the_readme_is_a_front_door():
    assert len(README.read_text().splitlines()) <= 200


def test_the_readmes_install_and_test_commands_are_what_ci_runs_word_for_word():
    install, tests = _bash_blocks(README.read_text())[:2]
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    assert install.strip() in ci
    assert tests.strip() in ci


def test_the_first_command_takes_torch_from_pytorchs_cpu_index():
    """PyPI's Linux torch is the CUDA build with GBs of NVIDIA libraries: the front door's
    first install must not pull it on a laptop."""
    install = _bash_blocks(README.read_text())[0]
    torch_step, project_step = install.split(" && pip install -e ")
    assert "pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu" in (
        torch_step
    )
    assert "torch" not in project_step


@pytest.fixture(scope="module")
def cli_reference() -> dict:
    return runpy.run_path(str(HOOKS / "cli_reference.py"))


def _option_strings(parser: argparse.ArgumentParser) -> list[str]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                found += _option_strings(command)
        elif not isinstance(action, argparse._HelpAction):
            found += action.option_strings or [action.dest]
    return found


def test_the_cli_reference_has_every_command_and_option_of_the_parsers(cli_reference):
    parser = build_parser([])
    text = cli_reference["render"](parser)
    for command in COMMANDS:
        assert f"## `kernelblaster {command}`" in text
    assert "### `kernelblaster kb proposals rename`" in text
    assert "`kernelblaster bench kernelbench`" in text
    missing = [option for option in _option_strings(parser) if f"`{option}" not in text]
    assert missing == []
    # argparse's own usage line and the help strings, as `--help` prints them
    assert "usage: kernelblaster build [-h] [--reference REFERENCE]" in text
    assert "the .cu file (or a KernelBench solution .py)" in text


def test_the_cli_page_gets_the_reference_in_place_of_its_marker(cli_reference):
    page = (REPO / "docs" / "cli.md").read_text()
    assert cli_reference["MARKER"] in page
    built = cli_reference["on_page_markdown"](page)
    assert cli_reference["MARKER"] not in built and "## `kernelblaster optimize`" in built


@pytest.fixture(scope="module")
def repo_links() -> dict:
    pytest.importorskip("mkdocs", reason="the site's hooks need MkDocs: pip install -e '.[docs]'")
    return runpy.run_path(str(HOOKS / "repo_links.py"))


def _relink(repo_links: dict, markdown: str, page: str = "learning.md") -> str:
    from mkdocs.structure.files import Files

    config = {
        "docs_dir": str(REPO / "docs"),
        "config_file_path": str(REPO / "mkdocs.yml"),
        "repo_url": "https://github.com/kernelblaster/kernelblaster",
    }
    fake_page = SimpleNamespace(file=SimpleNamespace(src_uri=page))
    return repo_links["on_page_markdown"](markdown, page=fake_page, config=config, files=Files([]))


def test_a_link_to_a_repository_file_goes_to_it_on_github(repo_links):
    text = "[the table](../bench/results/kb-vm.json) and [a folder](../examples)"
    assert _relink(repo_links, text) == (
        "[the table](https://github.com/kernelblaster/kernelblaster/blob/main/bench/results/"
        "kb-vm.json) and [a folder](https://github.com/kernelblaster/kernelblaster/tree/main/"
        "examples)"
    )


def test_an_included_files_link_goes_to_its_page(repo_links):
    text = "see [CONTRIBUTING.md](../CONTRIBUTING.md#style) and [docs](editor.md)"
    assert _relink(repo_links, text, "architecture.md") == (
        "see [CONTRIBUTING.md](contributing.md#style) and [docs](editor.md)"
    )


def test_a_link_to_a_missing_file_is_a_warning_that_fails_a_strict_build(repo_links, caplog):
    text = (
        "[gone](../bench/results/no-such-file.json)\n```\n[code](../not/a/link)\n"
        "![code too](../bench/results/learning-nvidia-h200.png)\n```\n"
    )
    with caplog.at_level(logging.WARNING, logger="mkdocs"):
        assert _relink(repo_links, text) == text
    (record,) = caplog.records
    assert record.name.startswith("mkdocs.") and record.levelno == logging.WARNING
    assert "../bench/results/no-such-file.json" in record.getMessage()


def test_the_site_shows_a_results_plot_from_its_own_copy(repo_links, tmp_path):
    """docs/learning.md shows bench/results/learning-nvidia-h200.png, which stays beside its
    result file: the strict build copies it into the site (which fetches nothing from
    elsewhere) and the page's image is that copy."""
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    plot = "bench/results/learning-nvidia-h200.png"
    assert (site / "repository" / plot).read_bytes() == (REPO / plot).read_bytes()
    assert f'src="../repository/{plot}"' in (site / "learning" / "index.html").read_text()
