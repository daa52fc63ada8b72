"""The CLI frame: help, version, exit codes, one-line errors, lazy imports."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lbtune.errors import ExitCode


def test_help_lists_commands(cli):
    r = cli("--help")
    assert r.exit_code == 0
    assert "show" in r.stdout and "doctor" in r.stdout
    assert "Exit codes" in r.stdout


def test_version(cli):
    import lbtune

    r = cli("--version")
    assert r.exit_code == 0
    assert lbtune.__version__ in r.stdout


def test_help_imports_no_heavy_modules():
    code = (
        "import sys, contextlib, io\n"
        "from lbtune.cli.main import invoke\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    invoke(['--help'])\n"
        "heavy = ('rich', 'pyroute2', 'textual', 'bcc', 'psutil')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & set(heavy)))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout.replace("'", '"')) == []


def _lbtune(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """`python -m lbtune ARGS` as a user starts it (a fresh interpreter), with env added."""
    import os

    return subprocess.run([sys.executable, "-m", "lbtune", *args], capture_output=True,
                          text=True, env={**os.environ, **env}, check=False)  # fmt: skip


def test_the_top_help_printed_before_click_is_clicks_own(cli, monkeypatch):
    """lbtune.cli.tophelp.TEXT is what click renders for `lbtune --help` at 80 columns and
    wider: a changed option, docstring or command fails here (paste click's text there)."""
    from lbtune.cli import tophelp

    for width in ("80", "200"):
        monkeypatch.setenv("COLUMNS", width)
        r = cli("--help")
        assert r.exit_code == 0
        assert r.stdout == tophelp.TEXT, f"lbtune/cli/tophelp.py TEXT is now:\n{r.stdout}"


def test_help_is_answered_without_importing_click():
    code = (
        "import sys\n"
        "sys.argv = ['lbtune', '--help']\n"
        "from lbtune.cli.entry import main\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as e:\n"
        "    print(e.code, sorted(m for m in sys.modules if m.startswith('click')),"
        " file=sys.stderr)\n"
    )
    import os

    env = {**os.environ, "COLUMNS": "100"}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       check=True)  # fmt: skip
    assert r.stderr == "0 []\n"
    from lbtune.cli import tophelp

    assert r.stdout == tophelp.TEXT


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_from_a_fresh_process_is_the_same_text_either_way(flag):
    from lbtune.cli import tophelp

    fast = _lbtune(flag, COLUMNS="120")
    assert (fast.returncode, fast.stdout, fast.stderr) == (0, tophelp.TEXT, "")
    # a terminal narrower than 80 columns: click wraps it to the width
    narrow = _lbtune(flag, COLUMNS="60")
    assert narrow.returncode == 0 and narrow.stdout != tophelp.TEXT
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 58
    assert narrow.stdout.split() == tophelp.TEXT.split()  # the same words
    # a bad LBTUNE_* variable is still one line and exit 2, help or not
    bad = _lbtune(flag, COLUMNS="120", LBTUNE_DEBUG="zz")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.startswith("lbtune: LBTUNE_DEBUG=") and bad.stderr.count("\n") == 1


def test_unknown_command_is_usage_error(cli):
    r = cli("frobnicate")
    assert r.exit_code == ExitCode.USAGE
    assert "Traceback" not in r.stderr


def test_nonexistent_root_is_one_line_exit_2(cli, tmp_path):
    r = cli("--root", str(tmp_path / "nope"), "show")
    assert r.exit_code == ExitCode.USAGE
    assert r.stderr == f"lbtune: --root {tmp_path / 'nope'}: no such directory or capture file\n"
    assert r.stdout == ""


def test_root_after_subcommand(cli, tmp_path):
    r = cli("show", "--root", str(tmp_path / "nope"))
    assert r.exit_code == ExitCode.USAGE
    assert "no such directory" in r.stderr


def test_empty_root_is_not_a_host_tree(cli, tmp_path):
    r = cli("--root", str(tmp_path), "show")
    assert r.exit_code == ExitCode.USAGE
    assert r.stderr.startswith("lbtune: ") and r.stderr.count("\n") == 1
    assert "no CPUs found" in r.stderr


def test_internal_error_is_one_line_and_exit_70(cli, monkeypatch):
    import lbtune.host.inventory as inventory

    def boom(*a, **k):
        raise RuntimeError("synthetic bug")

    monkeypatch.setattr(inventory, "discover_host", boom)
    r = cli("show")
    assert r.exit_code == ExitCode.INTERNAL
    assert r.stderr.count("\n") == 1
    assert "internal error: RuntimeError: synthetic bug" in r.stderr
    assert "Traceback" not in r.stderr


def test_debug_shows_traceback(cli, monkeypatch):
    import lbtune.host.inventory as inventory

    def boom(*a, **k):
        raise RuntimeError("synthetic bug")

    monkeypatch.setattr(inventory, "discover_host", boom)
    r = cli("--debug", "show")
    assert r.exit_code == ExitCode.INTERNAL
    assert "Traceback" in r.stderr


@pytest.mark.parametrize("code", list(ExitCode))
def test_exit_codes_are_documented(code):
    import pathlib

    readme = (pathlib.Path(__file__).parents[2] / "README.md").read_text()
    assert f"| {int(code)} " in readme, f"exit code {code!r} missing from README table"



def _ignore_sigint() -> None:  # runs in the child before exec
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_ctrl_c_during_a_diagnosis_window_exits_130_with_one_line(sigint):
    """click turns KeyboardInterrupt into Abort; it must still read as an interruption (130),
    not as bad input (2), also when lbtune was started with SIGINT ignored (a background job
    of a script; Python then leaves SIGINT ignored unless lbtune takes it). diagnose only reads
    counters, so the live host is safe to use."""
    import signal

    proc = subprocess.Popen(
        [sys.executable, "-m", "lbtune", "diagnose", "--duration", "30", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_ignore_sigint if sigint == "ignored" else None,
    )
    assert proc.stderr is not None
    seen = []
    for line in proc.stderr:  # progress until the window runs
        seen.append(line)
        if "sampling the counters" in line:
            break
    assert any("sampling the counters" in line for line in seen), seen
    proc.send_signal(signal.SIGINT)
    out, rest = proc.communicate(timeout=60)
    err = "".join(seen) + rest
    assert proc.returncode == ExitCode.INTERRUPTED, err
    assert "Traceback" not in err
    assert json.loads(out)["error"]["type"] == "interrupted"
