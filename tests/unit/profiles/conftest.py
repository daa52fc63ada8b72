"""Shared fixtures for the profile tests: the 48-CPU fixture host and a profile writer."""

from __future__ import annotations

import pathlib
from typing import Callable

import pytest

from lbtune.host.host import Host
from lbtune.host.inventory import HostInventory, discover_host
from tests.conftest import DELL, HOSTS

_cache: dict[str, HostInventory] = {}


def inventory(name: str = DELL) -> HostInventory:
    if name not in _cache:
        _cache[name] = discover_host(Host.open(str(HOSTS / name)))
    return _cache[name]


@pytest.fixture
def dell() -> HostInventory:
    return inventory()


@pytest.fixture
def write_profile(tmp_path: pathlib.Path) -> Callable[[str, str], pathlib.Path]:
    """Write `<tmp>/<name>.toml` and return its path."""

    def write(name: str, text: str) -> pathlib.Path:
        p = tmp_path / f"{name}.toml"
        p.write_text(text)
        return p

    return write
