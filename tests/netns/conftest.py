"""Throwaway network namespaces with veth pairs, always removed afterwards.

Tests never change the host, and a kernel module is host-global: every netns-tier test is
checked against /proc/modules before and after (`_no_host_module_loads`), and one that left a
module loaded fails, naming it. A test that needs a module (conntrack, IPVS) belongs in the
lab guest (tests/lab/). The exceptions are the link types and the qdisc the tier's namespaces
are built from (HOST_MODULES_OF_THE_TIER): a fresh host loads them for the first veth pair.
A kernel without loadable modules has no /proc/modules and nothing to check.
"""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from typing import Iterator

import pytest

_counter = itertools.count()

# What the tier's own namespaces need (veth pairs, the bridge of a few fixtures with its
# stp/llc, the tbf qdisc of the qdisc-drop fault): loaded by the kernel on first use.
HOST_MODULES_OF_THE_TIER = frozenset({"veth", "bridge", "stp", "llc", "sch_tbf"})


def loaded_modules(path: str = "/proc/modules") -> frozenset[str]:
    """Names of the loaded kernel modules (empty: no /proc/modules, no loadable modules)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return frozenset(line.split(" ", 1)[0] for line in fh if line.strip())
    except FileNotFoundError:
        return frozenset()


def new_host_modules(before: frozenset[str], after: frozenset[str]) -> list[str]:
    """Modules loaded between the two readings that the tier may not load."""
    return sorted(after - before - HOST_MODULES_OF_THE_TIER)


@pytest.fixture(autouse=True)
def _no_host_module_loads() -> Iterator[None]:
    before = loaded_modules()
    yield
    loaded = new_host_modules(before, loaded_modules())
    if loaded:
        pytest.fail(
            f"this test loaded kernel modules on the host: {', '.join(loaded)}; tests never "
            "change the host: run it in the lab guest (tests/lab/)", pytrace=False,
        )  # fmt: skip


def ip(*args: str) -> str:
    return subprocess.run(["ip", *args], check=True, capture_output=True, text=True).stdout


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/netns/" in str(item.fspath):
            item.add_marker(pytest.mark.netns)
            if os.geteuid() != 0 or shutil.which("ip") is None:
                item.add_marker(pytest.mark.skip(reason="netns tests need root and iproute2"))


@pytest.fixture
def netns() -> Iterator[str]:
    name = f"lbtune-t{os.getpid()}-{next(_counter)}"
    ip("netns", "add", name)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)


@pytest.fixture
def veth4(netns: str) -> str:
    """A veth pair v0/v1 with 4 rx and 4 tx queues each, up, inside `netns`."""
    ip(
        "-n", netns, "link", "add", "v0", "numrxqueues", "4", "numtxqueues", "4",
        "type", "veth", "peer", "name", "v1", "numrxqueues", "4", "numtxqueues", "4",
    )  # fmt: skip
    ip("-n", netns, "link", "set", "v0", "up")
    ip("-n", netns, "link", "set", "v1", "up")
    return netns


def in_netns(name: str, fn, *args):  # type: ignore[no-untyped-def]
    """Run fn(*args) in a forked child inside namespace `name`; return its result."""
    from tests.conftest import fork_call

    def enter_and_call():  # type: ignore[no-untyped-def]
        from lbtune.host.net.netns import enter_netns

        enter_netns(name)
        return fn(*args)

    return fork_call(enter_and_call)
