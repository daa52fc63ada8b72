"""`lbtune lab run --adaptive`: run the adaptive-weights experiment and render its table."""

from __future__ import annotations

from typing import Any, Optional

import click

from lbtune.cli.lab.common import int_list, run_with_progress
from lbtune.cli.main import runtime_of
from lbtune.cli.output import console, emit_json
from lbtune.errors import ExitCode


def _ms(v: Optional[float]) -> str:
    return "-" if v is None else f"{v:.0f}"


def _share(v: Optional[float]) -> str:
    return "unknown" if v is None else f"{v:.0%}"


def render(doc: dict[str, Any]) -> None:
    """The comparison table, per-server shares and adapt's weight changes."""
    from rich.table import Table

    from lbtune.lab.experiments.adaptive import rows

    out = console()
    servers = ", ".join(f"{n} {r} Mbit/s" for n, _a, r in doc["servers"])
    cfg = doc["config"]
    out.print(f"adaptive weights: {servers}; {cfg['connections']} connections, "
              f"{cfg['duration']:g} s per scheme, mix 50% 1 KiB / 40% 256 KiB / 10% 768 KiB",
              markup=False, soft_wrap=True)  # fmt: skip
    t = Table(box=None, pad_edge=False)
    names = [n for n, _a, _r in doc["servers"]]
    shares = [f"{n} share" for n in names]
    for col in ("scheme", "req/s", "p50 ms", "p99 ms", "errors", *shares, "weight changes"):
        t.add_column(col, justify="left" if col == "scheme" else "right")
    for r in rows(doc):
        t.add_row(r.scheme, "-" if r.rps is None else f"{r.rps:.1f}", _ms(r.p50_ms),
                  _ms(r.p99_ms), "-" if r.errors is None else str(r.errors),
                  *[_share(r.shares.get(n)) for n in names],
                  str(r.weight_changes) if r.scheme == "adapt" else "")  # fmt: skip
    out.print(t)
    for s in doc["schemes"]:
        if s.get("error"):
            out.print(f"{s['scheme']}: {s['error']}", markup=False)
        if s["scheme"] == "adapt":
            last = {}
            for e in s["events"]:
                if e.get("kind") == "weight" and e.get("applied"):
                    last[e["server"]] = e["weight"]
            if last:
                final = ", ".join(f"{k} {v}" for k, v in sorted(last.items()))
                out.print(f"adapt: last weights set {final}", markup=False)
    for n in doc.get("notes", ()):
        out.print(f"note: {n}", markup=False)


def run_adaptive_command(ctx: click.Context, rates: Optional[str], schemes: Optional[str],
                         duration: float, connections: int) -> int:  # fmt: skip
    from lbtune.lab.experiments.adaptive import SCHEMES, AdaptiveConfig
    from lbtune.lab.launch import run_adaptive_lab

    cfg = AdaptiveConfig(
        rates=int_list(rates, "--rates", "60,60,15") or AdaptiveConfig.rates,
        schemes=tuple(x.strip() for x in schemes.split(",")) if schemes else SCHEMES,
        duration=duration, connections=connections,
    )  # fmt: skip
    doc = run_with_progress(run_adaptive_lab, cfg)
    if runtime_of(ctx).json:
        emit_json(doc)
    else:
        render(doc)
    failed = any(s.get("error") or s.get("failures") for s in doc["schemes"])
    return int(ExitCode.FINDINGS) if failed else 0
