"""Reports made the way `lbtune diagnose` makes them, on copies of the virtio VM fixture.

`live_report`: a copy of the tree is sampled by the real `Sampler` through `window()` with a
one-second tick, on a fake clock that moves the tree's counters (and its uptime, which
stamps a tree's samples) while it "waits": softnet drops on CPU 1, virtio rx queue 2 drops
and packets, second by second as in MOVES. So the report's per-second series come from the
real pipeline with known values.
`baseline_report`: two captures of the same boot ten minutes apart (the later one with
more drops): before/after rates and the per-CPU and per-queue charts.
"""

from __future__ import annotations

import pathlib
import re
import threading
from typing import Optional

from lbtune.diagnose.report import LIVE, Report, diagnose, report_of
from lbtune.diagnose.rules import sample_spec, select
from lbtune.host.host import Host
from lbtune.observe.sampler import Sampler
from lbtune.observe.schedule import window
from tests.conftest import KVM, copy_host

SOFTNET = "/proc/net/softnet_stat"
ETHTOOL = "/sos_commands/networking/ethtool_-S_ens3"
# second of the window -> (CPU 1 backlog drops, ens3 rx queue 2 drops) in that second
MOVES = {1: (0, 0), 2: (40, 12), 3: (10, 3), 4: (0, 0)}


def bump(root: pathlib.Path, drops: int, queue_drops: int, packets: int = 5000) -> None:
    """Add to CPU 1's softnet processed/dropped and to ens3 rx queue 2's counters."""
    path = root / SOFTNET.lstrip("/")
    rows = [line.split() for line in path.read_text().splitlines()]
    cols = rows[1]
    cols[0] = f"{int(cols[0], 16) + packets:08x}"
    cols[1] = f"{int(cols[1], 16) + drops:08x}"
    path.write_text("\n".join(" ".join(r) for r in rows) + "\n")
    stats = root / ETHTOOL.lstrip("/")
    text = stats.read_text()

    def add(name: str, n: int) -> None:
        nonlocal text
        m = re.search(rf"(\s{name}: )(\d+)", text)
        assert m, name
        text = text[: m.start(2)] + str(int(m.group(2)) + n) + text[m.end(2) :]

    add("rx_queue_2_drops", queue_drops)
    add("rx_queue_2_packets", packets)
    add("rx_queue_0_packets", packets // 4)
    stats.write_text(text)


class MovingClock:
    """A fake clock: waiting advances time at once, and each whole second passed applies
    that second's MOVES to the tree (as the kernel would while lbtune waits)."""

    def __init__(self, root: pathlib.Path) -> None:
        self.root = root
        self.now = 5000.0
        self.start = self.now
        self.uptime = float((root / "proc/uptime").read_text().split()[0])

    def monotonic(self) -> float:
        return self.now

    def time(self) -> float:
        return 1_790_000_000.0 + self.now

    def wait(self, seconds: float, stop: Optional[threading.Event] = None) -> bool:
        before = int(self.now - self.start + 1e-9)
        self.now += max(0.0, seconds)
        after = int(self.now - self.start + 1e-9)
        for second in range(before + 1, after + 1):
            drops, queue_drops = MOVES.get(second, (0, 0))
            bump(self.root, drops, queue_drops)
        # a tree's samples are stamped with its uptime: it moves with the clock
        up = self.uptime + self.now - self.start
        (self.root / "proc/uptime").write_text(f"{up:.2f} {up:.2f}\n")
        return False


def live_report(tmp_path: pathlib.Path) -> Report:
    """A 4 s window with a 1 s tick, sampled from a moving copy of the VM tree."""
    root = copy_host(tmp_path, KVM, dest="live")
    host = Host.open(str(root))
    clock = MovingClock(root)
    sampler = Sampler(host, spec=sample_spec(select(None)), clock=clock)
    win = window(sampler, 4.0, tick=1.0)
    return report_of(host, win, LIVE, clock=clock)


def baseline_report(tmp_path: pathlib.Path) -> Report:
    """Two captures of one boot, 600 s apart; the later has 500 more CPU 1 drops."""
    base = copy_host(tmp_path, KVM, dest="base")
    later = copy_host(tmp_path, KVM, dest="later")
    up = float((later / "proc/uptime").read_text().split()[0])
    (later / "proc/uptime").write_text(f"{up + 600:.2f} {up:.2f}\n")
    bump(later, 500, 1000, packets=600_000)
    return diagnose(Host.open(str(later)), baseline=Host.open(str(base)))
