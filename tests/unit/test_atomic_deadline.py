"""The one atomic writer (lbtune.host.atomic) and the one deadline loop (lbtune.host.deadline)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from lbtune.host.atomic import TMP_INFIX, temp_path, write_atomic, write_json_atomic, write_temp
from lbtune.host.deadline import wait_until


def test_a_file_is_replaced_whole_and_no_temporary_is_left(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_text("old")
    write_json_atomic(target, {"a": 1})
    assert json.loads(target.read_text()) == {"a": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_the_mode_follows_the_umask_unless_exact(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        write_atomic(tmp_path / "narrowed", b"x", 0o644)
        write_atomic(tmp_path / "exact", b"x", 0o644, exact_mode=True)
    finally:
        os.umask(old)
    assert (tmp_path / "narrowed").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "exact").stat().st_mode & 0o777 == 0o644


def test_never_through_a_symlink_at_the_temporary(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep")
    target = tmp_path / "out"
    Path(temp_path(target)).symlink_to(victim)
    with pytest.raises(OSError):
        write_atomic(target, b"new")
    assert victim.read_text() == "keep" and not target.exists()


def test_an_exclusive_temporary_refuses_one_that_exists(tmp_path: Path) -> None:
    target = tmp_path / "report"
    Path(temp_path(target)).write_text("another writer")
    with pytest.raises(FileExistsError):
        write_temp(target, b"x", exclusive=True)
    assert TMP_INFIX in temp_path(target) and str(os.getpid()) in temp_path(target)


def test_wait_until_says_whether_it_came_true_in_time() -> None:
    calls = []

    def third() -> bool:
        calls.append(1)
        return len(calls) >= 3

    assert wait_until(third, 5, 0.001) is True and len(calls) == 3
    start = time.monotonic()
    assert wait_until(lambda: False, 0.05, 0.01) is False
    assert time.monotonic() - start >= 0.05


def test_wait_until_stops_when_done_raises() -> None:
    def broken() -> bool:
        raise RuntimeError("the guest died")

    with pytest.raises(RuntimeError, match="the guest died"):
        wait_until(broken, 5)
