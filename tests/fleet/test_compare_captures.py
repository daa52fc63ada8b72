"""`lbtune compare` on real capture tarballs of throwaway namespaces (`lbtune capture`)."""

from __future__ import annotations

import itertools
import os
import pathlib
import shutil
import subprocess
import sys
from typing import Iterator

import pytest

LBTUNE = str(pathlib.Path(sys.executable).parent / "lbtune")
_ids = itertools.count()

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("ip") is None,
    reason="needs root and iproute2 (captures of namespaces)",
)


@pytest.fixture
def two_hosts() -> Iterator[list[str]]:
    names = [f"lbt-cmp{os.getpid()}-{next(_ids)}" for _ in range(2)]
    try:
        for n in names:
            subprocess.run(["ip", "netns", "add", n], check=True)
            subprocess.run(["ip", "-n", n, "link", "set", "lo", "up"], check=True)
        yield names
    finally:
        for n in names:
            subprocess.run(["ip", "netns", "del", n], check=False, capture_output=True)


def lbtune(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([LBTUNE, *args], capture_output=True, text=True, timeout=120)


def test_captures_of_two_namespaces(tmp_path: pathlib.Path, two_hosts: list[str]) -> None:
    _a, b = two_hosts
    subprocess.run(["ip", "netns", "exec", b, "sysctl", "-qw", "net.core.somaxconn=1024"],
                   check=True)
    tars = []
    for ns in two_hosts:
        out = tmp_path / f"{ns}.tar.gz"
        r = lbtune("--netns", ns, "capture", "-o", str(out))
        assert r.returncode == 0, r.stderr
        tars.append(str(out))
    r = lbtune("compare", *tars, "--json")
    import json

    doc = json.loads(r.stdout)
    assert r.returncode == 1, r.stderr
    [host] = doc["hosts"]
    assert host["source"] == tars[1]
    diffs = {(d["area"], d["object"]): (d["template"], d["value"]) for d in host["differences"]}
    assert diffs == {("sysctl", "net.core.somaxconn"): ("4096", "1024")}, diffs
    assert host["compared"] > 100  # the namespaces' whole net.* sysctl trees

    # Against a profile: the namespace's own values verified as `lbtune verify` would.
    prof = tmp_path / "fleet-somaxconn.toml"
    prof.write_text('[profile]\nname = "fleet-somaxconn"\ndescription = "t"\n[sysctl]\n'
                    '"net.core.somaxconn" = { value = 4096, reason = "the template" }\n')
    r = lbtune("compare", *tars, "--against", str(prof), "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == 1
    by_source = {h["source"]: h for h in doc["hosts"]}
    assert by_source[tars[0]]["in_sync"] is True
    assert [(d["object"], d["template"], d["value"]) for d in by_source[tars[1]]["differences"]] \
        == [("net.core.somaxconn", "4096", "1024")]
