"""Throwaway network namespaces with veth pairs, always removed afterwards."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
from typing import Iterator

import pytest

_counter = itertools.count()


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
        from lbtune.host.netns import enter_netns

        enter_netns(name)
        return fn(*args)

    return fork_call(enter_and_call)
