"""Shared test helpers: the one in-process CLI runner, fixture-host paths, privilege checks."""

from __future__ import annotations

import contextlib
import io
import json
import os
import pathlib
from dataclasses import dataclass
from typing import Any, Optional

import pytest

HOSTS = pathlib.Path(__file__).parent / "data" / "hosts"


@dataclass
class CliResult:
    exit_code: int
    stdout: str
    stderr: str

    @property
    def json(self) -> Any:
        return json.loads(self.stdout)


def _run_here(args: list[str]) -> CliResult:
    from lbtune.cli.main import invoke

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = invoke(args)
    return CliResult(code, out.getvalue(), err.getvalue())


def _run_forked(args: list[str]) -> CliResult:
    """Run in a forked child: --netns moves the process into other namespaces for good."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        os.close(r)
        try:
            res = _run_here(args)
            payload = json.dumps([res.exit_code, res.stdout, res.stderr]).encode()
        except BaseException as e:  # report, never fall back into the test runner
            payload = json.dumps([99, "", f"child crashed: {e!r}"]).encode()
        with os.fdopen(w, "wb") as f:
            f.write(payload)
        os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    code, out, err = json.loads(data)
    return CliResult(code, out, err)


def run_cli(*args: str, isolate: Optional[bool] = None) -> CliResult:
    """Run `lbtune ARGS` in-process; returns exit code, stdout, stderr (and .json)."""
    argv = list(args)
    if isolate is None:
        isolate = "--netns" in argv
    return _run_forked(argv) if isolate else _run_here(argv)


@pytest.fixture
def cli() -> Any:
    return run_cli


@pytest.fixture
def hosts() -> pathlib.Path:
    return HOSTS


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
