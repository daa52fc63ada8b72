"""`lbtune exporter` on every recorded host, scraped again and again in one process: the
readers keep what they learnt of a file's shape between reads (ethtool -S layouts, the tails
of /proc/interrupts rows, per-driver queue plans), so each scrape after the first takes a
quicker way to the same numbers. Every scrape's text must be the first one's, byte for byte,
and the first one's must be what a process that never read the host before writes."""

from __future__ import annotations

import re

import pytest

import lbtune.host.kernel.interrupts as interrupts
import lbtune.host.net.ethtool as ethtool
import lbtune.observe.nicstats as nicstats
from lbtune.exporter.collect import Exporter
from lbtune.exporter.series import Options
from lbtune.host.runtime import Runtime
from lbtune.observe.window import Window
from tests.conftest import HOSTS

TREES = sorted(p.name for p in HOSTS.iterdir() if (p / "proc").is_dir())
DURATION = re.compile(rb"^lbtune_scrape_duration_seconds .*$", re.M)


def _forget_shapes() -> None:
    """What the readers learnt of the shapes of files, forgotten: a first read again."""
    for kept in (ethtool._LAYOUTS, ethtool._WORDS, interrupts._tails, nicstats._CACHE,
                 nicstats._PLANS):  # fmt: skip
        kept.clear()


def _text(exp: Exporter, window: Window | None = None) -> bytes:
    result = exp.scrape() if window is None else exp.collect(window)
    return DURATION.sub(b"lbtune_scrape_duration_seconds (its own time)", result.text)


@pytest.mark.parametrize("opt_in", [False, True], ids=["defaults", "every-opt-in"])
@pytest.mark.parametrize("tree", TREES)
def test_every_scrape_writes_the_first_scrapes_text(tree: str, opt_in: bool) -> None:
    root = HOSTS / tree
    net = root / "sys/class/net"
    nics = tuple(sorted(p.name for p in net.iterdir())) if opt_in and net.is_dir() else ()
    opts = Options(listeners=100, queues_of=nics, softnet_all=True, ipvs_real_servers=True,
                   host_series=True) if opt_in else Options()  # fmt: skip
    _forget_shapes()
    exp = Exporter(Runtime(root=str(root)), opts, min_interval=0)
    try:
        first = _text(exp)
        assert b"lbtune_up 1.0" in first
        assert all(_text(exp) == first for _ in range(3))
        # The same text from a sample taken on a warm process, as a window since boot.
        exp.totals.values.clear()
        assert _text(exp, Window(None, exp.sampler.take())) == first
    finally:
        exp.close()
