"""The man pages (scripts/manpages.py, `make man`) cannot drift from `--help`.

`make man` writes lbtune(8) and lbtune-COMMAND(8) into a build directory; every page renders
without a warning through man-db exactly as lintian checks it, and through groff's strictest
warnings. The command tree is walked again here the way a user sees it, from `--help`
output (each group's "Commands:" section), and every command must appear in a page with its
description and every option row that `--help` prints (compared with white space removed, so
the two renderers' line breaks do not matter). A command added to the command line shows up
in a generated page, and a page set without it fails the walk.
"""

from __future__ import annotations

import os
import pathlib
import re
import shutil
import subprocess
import sys

import pytest

from tests.conftest import run_cli

TOP = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(TOP / "scripts"))
import manpages  # noqa: E402


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, pathlib.Path]:
    """`make man` into a temp build directory, as a package build runs it."""
    build = tmp_path_factory.mktemp("build")
    r = subprocess.run(["make", "-C", str(TOP), "man", f"BUILD={build}",
                        f"PYTHON={sys.executable}"], capture_output=True, text=True,
                       check=False)  # fmt: skip
    assert r.returncode == 0, r.stderr
    return {p.name: p for p in sorted((build / "man").glob("*"))}


def render(page: pathlib.Path) -> str:
    """The page as plain text (groff, no bold or underline), minus signs as typed."""
    r = subprocess.run(["groff", "-man", "-Tutf8", "-P-cbou", str(page)], capture_output=True,
                       text=True, check=True)  # fmt: skip
    return r.stdout.replace("\u2212", "-").replace("\u2010", "-")


def squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


def help_of(path: list[str]) -> str:
    r = run_cli(*path, "--help")
    assert r.exit_code == 0, r.stderr
    return r.stdout


def commands_in(help_text: str) -> list[str]:
    """The subcommands a group's `--help` lists."""
    if "\nCommands:\n" not in help_text:
        return []
    section = help_text.split("\nCommands:\n", 1)[1]
    return [m.group(1) for m in re.finditer(r"^  (\S+)", section, re.M)]


def help_walk() -> list[list[str]]:
    """Every command path, found from `--help` as a user finds them."""
    out: list[list[str]] = []
    todo = [[c] for c in commands_in(help_of([]))]
    while todo:
        path = todo.pop(0)
        out.append(path)
        todo += [[*path, c] for c in commands_in(help_of(path))]
    return out


def missing_from(pages: dict[str, str]) -> list[str]:
    """Commands of the `--help` walk with no page holding them (roff source of each page)."""
    missing = []
    for path in help_walk():
        text = pages.get(f"lbtune-{path[0]}.8", "")
        if squash(" ".join(["lbtune", *path])) not in squash(text.replace("\\-", "-")):
            missing.append(" ".join(path))
    return missing


def test_make_man_writes_one_page_per_command(built):
    tops = commands_in(help_of([]))
    assert {"ipvs", "lab", "apply", "completion"} <= set(tops)
    assert sorted(built) == sorted(["lbtune.8", *(f"lbtune-{c}.8" for c in tops)])


def test_every_page_renders_without_warnings(built):
    assert shutil.which("man") and shutil.which("groff"), "make setup installs man-db"
    env = {**os.environ, "LC_ALL": "C.UTF-8", "MANROFFSEQ": "", "MANWIDTH": "80"}
    for name, page in built.items():
        # lintian's check (manpage-has-errors-from-man), then groff's every warning
        lint = subprocess.run(["man", "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z",
                               str(page)], capture_output=True, text=True, env=env,
                              check=False)  # fmt: skip
        assert lint.returncode == 0 and lint.stderr == "", f"{name}: {lint.stderr}"
        strict = subprocess.run(["groff", "-man", "-ww", "-b", "-z", str(page)],
                                capture_output=True, text=True, check=False)  # fmt: skip
        assert strict.returncode == 0 and strict.stderr == "", f"{name}: {strict.stderr}"
        text = render(page)
        for section in ("NAME", "SYNOPSIS", "DESCRIPTION", "OPTIONS", "EXIT STATUS", "SEE ALSO"):
            assert f"\n{section}\n" in text, f"{name} has no {section}"


def test_every_command_is_in_a_page_with_its_help(built):
    pages = {name: render(p) for name, p in built.items()}
    walked = help_walk()
    assert ["ipvs", "realserver", "verify"] in walked and ["lab", "run"] in walked
    for path in [[], *walked]:
        help_text = help_of(path)
        page = squash(pages["lbtune.8" if not path else f"lbtune-{path[0]}.8"])
        where = " ".join(["lbtune", *path])
        assert squash(where) in page, f"{where}: not in its page"
        body = help_text.split("\n\n", 1)[1]  # after the Usage line
        description = re.split(r"\n(?:Options|Commands):\n", body)[0]
        assert squash(description) in page, f"{where}: description differs from --help"
        if "\nOptions:\n" in help_text:
            rows = help_text.split("\nOptions:\n", 1)[1].split("\nCommands:\n")[0]
            assert squash(rows) in page, f"{where}: options differ from --help"


def test_exit_status_lists_every_documented_code(built):
    from lbtune.errors import EXIT_MEANINGS, ExitCode

    assert set(EXIT_MEANINGS) == set(ExitCode)
    readme = (TOP / "README.md").read_text()
    text = render(built["lbtune-ipvs.8"])
    status = text.split("\nEXIT STATUS\n", 1)[1]
    for code in ExitCode:
        assert f"\n| {int(code)} |" in readme  # README's table documents it too
        assert re.search(rf"^ +{int(code)} +\S", status, re.M), f"exit {int(code)} missing"


def test_a_new_command_gets_a_page_and_a_page_set_without_it_fails(monkeypatch):
    from lbtune.cli import main

    before = manpages.pages(main.cli)
    assert missing_from(before) == []
    monkeypatch.setitem(main.COMMANDS, "zz-new", ("lbtune.cli.doctor", "A command added."))
    assert missing_from(before) == ["zz-new"]  # derived from the tree, not from a list
    after = manpages.pages(main.cli)
    assert "lbtune-zz-new.8" in after and missing_from(after) == []
    assert "A command added" in after["lbtune.8"]


def test_the_date_is_source_date_epochs(monkeypatch):
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1764374400")
    assert manpages.build_date() == "2025-11-29"
    from lbtune.cli.main import cli

    assert '"2025-11-29"' in manpages.pages(cli, manpages.build_date())["lbtune.8"]
