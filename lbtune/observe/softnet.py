"""Per-CPU packet-processing counters of /proc/net/softnet_stat.

One line per *online* CPU, hex columns (softnet_seq_show in net/core/net-procfs.c): 1 processed,
2 dropped (the CPU's input backlog was full: net.core.netdev_max_backlog), 3 time_squeeze (a
NAPI round ended with work left: net.core.netdev_budget / netdev_budget_usecs), 4-9 zero,
10 received_rps, 11 flow_limit_count, and since 5.10 12 the backlog length and 13 the CPU id
(6.x adds input and process queue lengths after it). Without column 13 the line number is
not the CPU id once a CPU is offline: line i belongs to the i-th online CPU.
"""

from __future__ import annotations

from typing import Optional, Sequence

from lbtune.errors import MalformedHostFile
from lbtune.host.fs import HostFS
from lbtune.observe.model import SoftnetCpu

SOFTNET = "/proc/net/softnet_stat"
ONLINE = "/sys/devices/system/cpu/online"


def parse_softnet(
    text: str, source: str, online: Optional[Sequence[int]] = None
) -> tuple[SoftnetCpu, ...]:
    """Parse /proc/net/softnet_stat.

    The CPU id comes from column 13 when the kernel prints it (5.10+). Older kernels print no
    id: line i is then the i-th CPU of `online` (sorted) when given, else CPU i.
    """
    order = sorted(online) if online is not None else None
    rows: list[SoftnetCpu] = []
    lines = [line for line in text.splitlines() if line.strip()]
    for i, line in enumerate(lines):
        cols = line.split()
        n = len(cols)
        if n < 10:
            raise MalformedHostFile(source, f"line {i + 1}: {n} columns, expected at least 10")
        try:
            if n >= 13:
                cpu = int(cols[12], 16)
            elif order is not None:
                if i >= len(order):
                    raise MalformedHostFile(
                        source, f"{len(lines)} lines but only {len(order)} online CPUs"
                    )
                cpu = order[i]
            else:
                cpu = i
            rows.append(
                SoftnetCpu(
                    cpu=cpu,
                    processed=int(cols[0], 16),
                    dropped=int(cols[1], 16),
                    time_squeeze=int(cols[2], 16),
                    received_rps=int(cols[9], 16),
                    flow_limit=int(cols[10], 16) if n > 10 else 0,
                    backlog_len=int(cols[11], 16) if n > 11 else None,
                )
            )
        except ValueError:
            raise MalformedHostFile(source, f"line {i + 1}: not hexadecimal: {line!r}") from None
    return tuple(rows)


def read_softnet(fs: HostFS) -> tuple[SoftnetCpu, ...]:
    """softnet_stat of the host; empty when the file is absent.

    The online CPU list is read only for kernels that do not print the CPU id.
    """
    text = fs.read(SOFTNET)
    if text is None:
        return ()
    first = text.split("\n", 1)[0].split()
    online: Optional[Sequence[int]] = None
    if 0 < len(first) < 13:
        cpus = fs.read_cpulist(ONLINE)
        online = sorted(cpus) if cpus is not None else None
    return parse_softnet(text, fs.path(SOFTNET), online)
