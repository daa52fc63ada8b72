"""Checks of an IPVS DR real server (and a director's VIP): the VIP on lo as a host route,
ARP behaviour (arp_ignore, arp_announce) and reverse-path filtering, each as the effective
max(all, interface) value."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Optional

from lbtune.diagnose.checklist.model import (
    IGNORED_PORTS,
    IP_ADDR_RECORD,
    WILDCARDS,
    CheckResult,
    Ctx,
    is_up,
    lowers,
    result,
)
from lbtune.host.kernel.sysctl import effective_conf
from lbtune.vocab import Level


@dataclass(frozen=True)
class IfAddr:
    ifname: str
    family: int  # 4 or 6
    addr: str
    prefix: int


def parse_ip_o_addr(text: str) -> list[IfAddr]:
    """`ip -o addr` lines: `1: lo    inet 127.0.0.1/8 scope host lo\\ ...`."""
    out = []
    for line in text.splitlines():
        words = line.split()
        if len(words) < 4 or not words[0].endswith(":") or words[2] not in ("inet", "inet6"):
            continue
        addr, _, prefix = words[3].partition("/")
        try:
            ipaddress.ip_address(addr)
            bits = int(prefix) if prefix else (32 if words[2] == "inet" else 128)
        except ValueError:
            continue
        out.append(IfAddr(words[1].split("@")[0], 4 if words[2] == "inet" else 6, addr, bits))
    return out


def _addresses(c: Ctx) -> tuple[Optional[list[IfAddr]], str]:
    if c.host.is_live:
        res = c.host.runner.run(["ip", "-o", "addr", "show"])
        if not res.ok:
            return None, f"`ip -o addr show` failed: {res.stderr.strip() or res.returncode}"
        return parse_ip_o_addr(res.stdout), ""
    text = c.host.fs.read(IP_ADDR_RECORD)
    if text is None:
        return None, f"no {IP_ADDR_RECORD.lstrip('/')} recording in this host tree"
    return parse_ip_o_addr(text), ""


def check_vip(c: Ctx) -> CheckResult:
    name = "dr-vip"
    assert c.vip is not None
    vip = str(c.vip)
    full = 32 if c.vip.version == 4 else 128
    addrs, error = _addresses(c)
    if addrs is None:
        return result(name, Level.SKIP, error)
    hits = [a for a in addrs if a.addr == vip]
    add = f"ip addr add {vip}/{full} dev lo"
    if c.role == "lb-dr":
        on = [a for a in hits if a.ifname != "lo"]
        if on:
            return result(name, Level.PASS, f"VIP {vip} is on {on[0].ifname}")
        return result(
            name,
            Level.WARN,
            f"VIP {vip} is not configured {c.where} (keepalived holds it only on the "
            "active director)",
            "check keepalived state; the VIP belongs on the data interface of the active director",
        )
    elsewhere = [a for a in hits if a.ifname != "lo"]
    if elsewhere:
        return result(
            name,
            Level.FAIL,
            f"VIP {vip} is on {elsewhere[0].ifname}: this real server answers ARP for it "
            "and clients bypass the director",
            f"ip addr del {vip}/{elsewhere[0].prefix} dev {elsewhere[0].ifname}; {add}",
        )
    on_lo = [a for a in hits if a.ifname == "lo"]
    if not on_lo:
        return result(
            name,
            Level.FAIL,
            f"VIP {vip} is not on lo: the kernel drops packets the director forwards to it",
            add,
        )
    if on_lo[0].prefix != full:
        return result(
            name,
            Level.FAIL,
            f"VIP {vip} is on lo as /{on_lo[0].prefix}: the whole prefix becomes local "
            "and replies to clients in it never leave the host",
            f"ip addr del {vip}/{on_lo[0].prefix} dev lo; {add}",
        )
    if c.listeners is not None:
        accepting = [
            s for s in c.listeners if s.addr in (vip, *WILDCARDS) and s.port not in IGNORED_PORTS
        ]
        if not accepting:
            return result(
                name,
                Level.WARN,
                f"VIP {vip}/{full} is on lo, but no listener accepts on the VIP or on a "
                "wildcard address",
                "bind the service to 0.0.0.0 or the VIP",
            )
    return result(name, Level.PASS, f"VIP {vip}/{full} is on lo")


def _facing(c: Ctx) -> list[str]:
    """Interfaces that can receive client/director traffic: up, not lo, not bond slaves."""
    slaves = lowers(c.inv)
    names = [n.name for n in c.inv.nics if is_up(n) and n.name not in slaves]
    return [n for n in names if c.host.fs.exists(f"/proc/sys/net/ipv4/conf/{n}")]


def _effective(c: Ctx, key: str, ifaces: list[str]) -> dict[str, tuple[int, int, int]]:
    """iface -> (effective, all, iface) for a max(all, iface) setting."""
    out = {}
    for i in ifaces:
        values = effective_conf(c.host.fs, i, key)
        if values is not None:
            out[i] = values
    return out


def check_arp(c: Ctx, key: str, want: int, why: str) -> CheckResult:
    name = f"dr-{key.replace('_', '-')}"
    if c.vip is not None and c.vip.version == 6:
        return result(name, Level.SKIP, "IPv6 VIP: neighbour discovery, not ARP")
    ifaces = _facing(c)
    values = _effective(c, key, ifaces)
    if not values:
        return result(name, Level.SKIP, f"no net.ipv4.conf.*.{key} for the interfaces {c.where}")
    low = {i: v for i, v in values.items() if v[0] < want}
    shown = ", ".join(f"{i} {v[0]} (all {v[1]}, {i} {v[2]})" for i, v in sorted(values.items()))
    if low:
        return result(
            name,
            Level.FAIL,
            f"effective {key} (max of all and the interface) below {want}: {shown}; {why}",
            f"sysctl.net.ipv4.conf.all.{key} = {want}, which raises every interface's effective "
            f"value ({c.apply_cmd})",
        )
    return result(name, Level.PASS, f"effective {key}: {shown}")


def check_rp_filter(c: Ctx) -> CheckResult:
    name = "dr-rp-filter"
    ifaces = [c.iface] if c.iface else _facing(c)
    values = _effective(c, "rp_filter", ifaces)
    if not values:
        return result(
            name, Level.SKIP, f"no net.ipv4.conf.*.rp_filter for the interfaces {c.where}"
        )
    strict = {i: v for i, v in values.items() if v[0] == 1}
    shown = ", ".join(f"{i} {v[0]} (all {v[1]}, {i} {v[2]})" for i, v in sorted(values.items()))
    if strict:
        return result(
            name,
            Level.FAIL,
            f"strict reverse-path filter (1) on the interface receiving VIP traffic: "
            f"{shown}; packets whose route back leaves by another interface are dropped "
            "(IPReversePathFilter), common with DR's asymmetric paths",
            "sysctl.net.ipv4.conf.all.rp_filter = 2, which makes every interface at least loose "
            f"({c.apply_cmd})",
        )
    return result(name, Level.PASS, f"effective rp_filter (0 off, 2 loose): {shown}")
