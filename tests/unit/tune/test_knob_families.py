"""Knob families load on first use: the kind table lists every kind of every family, and a
journal of sysctls is turned back into knobs without importing the other families."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import subprocess
import sys

import lbtune.tune.knobs as knobs
from lbtune.tune.knob import Knob
from lbtune.tune.registry import kinds, knob_from_record


def test_the_kind_table_lists_every_kind_of_every_family():
    found = {}
    for info in pkgutil.iter_modules(knobs.__path__):
        module = importlib.import_module(f"lbtune.tune.knobs.{info.name}")
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if (issubclass(cls, Knob) and cls.__module__ == module.__name__
                    and getattr(cls, "kind", None)):  # fmt: skip
                found[cls.kind] = info.name
    assert found == knobs.FAMILY_OF_KIND
    assert [c.kind for c in knobs.ALL_KINDS] == list(knobs.FAMILY_OF_KIND)
    assert set(kinds()) >= set(found)
    assert knobs.SysctlKnob is knobs.kind_class("sysctl")


def test_a_sysctl_journal_imports_the_sysctl_family_only():
    code = (
        "import sys\n"
        "from lbtune.tune.registry import knob_from_record\n"
        "k = knob_from_record('sysctl', 'net.core.somaxconn')\n"
        "print(type(k).__name__, sorted(m for m in sys.modules if m.startswith("
        "('lbtune.tune.knobs.', 'lbtune.host.ipvs.table'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split(maxsplit=1)  # fmt: skip
    assert out[0] == "SysctlKnob"
    assert out[1].strip() == "['lbtune.tune.knobs.sysctl']"


def test_an_unknown_kind_is_bad_input():
    import pytest

    from lbtune.errors import BadInput

    with pytest.raises(BadInput, match="unknown knob kind 'nope'"):
        knob_from_record("nope", "x")
