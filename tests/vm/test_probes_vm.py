"""The eBPF probes on Debian's 6.1 in the VM lab guest, against traffic with a known answer.

The probe tests of tests/netns run on the development kernel; there two of them (the listen
overflow) skip on kernels before 6.15, which have no TCP_LISTEN_OVERFLOW drop reason. Here,
on 6.1, that path is asserted: the probe has no such row and `diagnose` explains the overflow
from its counters alone.

bcc compiles take minutes under TCG, so the guest compiles the three probes once
(tests/vm/guest_probes.py:session does every case in one ProbeSession), and `diagnose` once
more. Drop reason numbers are checked against this kernel's own header (the
linux-headers package the guest kernel is pinned to), not against numbers written here.
"""

from __future__ import annotations

import json
import re
import socket
import struct
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Optional

import pytest

from lbtune.lab.guests.vm import VmGuest, find_vm_image
from tests.conftest import needs_bcc

pytestmark = [pytest.mark.vm, needs_bcc]

N_CLOSED = 300  # UDP datagrams to a closed port
M_RCVBUF = 200  # datagrams at a socket with the smallest receive buffer
PER_QUEUE = [10, 20, 30, 40]  # tx datagrams per virtio queue: a swapped queue cannot pass
N_RX = 256  # frames injected from the host side of the tap
RX_FLOWS = 64  # source ports: the tap's flow hash spreads them over its 4 queues


# ----------------------------------------------------------------------------- host side


def _host_ns_mac(ns: str, dev: str) -> str:
    out = subprocess.run(["ip", "-n", ns, "-j", "link", "show", dev], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    return str(json.loads(out)[0]["address"])


def _checksum(data: bytes) -> int:
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def udp_frame(src_mac: str, dst_mac: str, src: str, dst: str, sport: int, dport: int,
              payload: bytes) -> bytes:  # fmt: skip
    """An Ethernet frame with an IPv4/UDP datagram (UDP checksum 0: none, allowed on IPv4)."""
    udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 0, 0, 64, 17, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))  # fmt: skip
    ip = ip[:10] + struct.pack("!H", _checksum(ip)) + ip[12:]
    mac = bytes.fromhex(dst_mac.replace(":", "")) + bytes.fromhex(src_mac.replace(":", ""))
    return mac + b"\x08\x00" + ip + udp


def inject(ns: str, guest_mac: str, n: int) -> None:
    """n frames into the tap (host side, in the VM's throwaway namespace) for the guest's
    eth0; the tap has no address, so the host side never answers the guest."""
    from tests.netns.probe_traffic import in_namespace_thread
    from tests.vm.guest_probes import GUEST_IP, HOST_IP, RX_PORT

    tap_mac = _host_ns_mac(ns, "tap0")

    def send() -> None:
        with socket.socket(socket.AF_PACKET, socket.SOCK_RAW, 0) as s:
            s.bind(("tap0", 0))
            for i in range(n):
                s.send(udp_frame(tap_mac, guest_mac, HOST_IP, GUEST_IP, 40000 + i % RX_FLOWS,
                                 RX_PORT, b"lbtune-vm-rx"))  # fmt: skip

    in_namespace_thread(ns, send)


def header_reason(version: str, name: str) -> Optional[int]:
    """`name`'s number in enum skb_drop_reason of the guest kernel's own header (the
    linux-headers package the VM image is pinned to): its position in the enum."""
    base = version.rsplit("-", 1)[0]  # 6.1.0-56-amd64 -> 6.1.0-56
    text = Path(f"/usr/src/linux-headers-{base}-common/include/net/dropreason.h").read_text()
    body = text.split("enum skb_drop_reason {", 1)[1].split("};", 1)[0]
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    members = re.findall(r"^\s*(SKB_[A-Z0-9_]+)\s*(?:=\s*(\d+))?\s*,", body, flags=re.M)
    value = -1
    for member, explicit in members:
        value = int(explicit) if explicit else value + 1
        if member in (f"SKB_DROP_REASON_{name}", f"SKB_{name}"):
            return value
    return None


def host_reason(name: str) -> Optional[int]:
    """The development host's number for `name` (its BTF, read only)."""
    from lbtune.host.fs import HostFS
    from lbtune.host.trace.btf import kernel_enums

    for e in kernel_enums(HostFS("/"), modules=False):
        if e.name == "skb_drop_reason":
            members = dict(e.members)
            return members.get(f"SKB_DROP_REASON_{name}", members.get(f"SKB_{name}"))
    return None


# ----------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def probes(vm: VmGuest) -> dict[str, Any]:
    """The one probe session in the guest; the host injects the rx frames when asked."""
    flags = vm.workdir / "probes"
    flags.mkdir()
    subprocess.run(["ip", "netns", "exec", vm.netns, "sysctl", "-q", "-w",
                    "net.ipv6.conf.tap0.disable_ipv6=1"], check=True)  # fmt: skip
    box: dict[str, Any] = {}

    def guest() -> None:
        try:
            box["value"] = vm.call(
                "tests.vm.guest_probes:session",
                [str(flags), _host_ns_mac(vm.netns, "tap0"), N_CLOSED, M_RCVBUF, PER_QUEUE, N_RX],
                timeout=1800,
            )
        except BaseException as exc:  # re-raised below, in the test's thread
            box["error"] = exc

    t = threading.Thread(target=guest)
    t.start()
    ready = flags / "guest.json"
    deadline = time.monotonic() + 1800
    while not ready.exists() and t.is_alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    if ready.exists():
        # the guest renames a whole file into place; read it once and fail loudly if not
        inject(vm.netns, json.loads(ready.read_text())["mac"], N_RX)
        (flags / "sent").write_text("")
    t.join(600)
    if "error" in box:
        raise box["error"]
    assert "value" in box, "the guest's probe session did not finish"
    return box["value"]  # type: ignore[no-any-return]


def _sum(rows: list[dict[str, Any]], **match: Any) -> int:
    return sum(r["count"] for r in rows if all(r[k] == v for k, v in match.items()))


# ----------------------------------------------------------------------------- drop reasons


def test_drop_reason_numbers_are_this_kernels_own(vm: VmGuest) -> None:
    version = find_vm_image().version
    got = vm.call("tests.vm.guest_probes:reasons")
    assert got["kernel"] == version
    reasons = got["reasons"]
    for name in ("NOT_SPECIFIED", "NO_SOCKET", "SOCKET_RCVBUFF"):
        assert reasons[name] is not None and reasons[name] == header_reason(version, name), name
    # 6.1 has neither: CONSUMED came in 6.2 (and moved every number after it by one),
    # TCP_LISTEN_OVERFLOW in 6.15.
    assert reasons["CONSUMED"] is None and header_reason(version, "CONSUMED") is None
    assert reasons["TCP_LISTEN_OVERFLOW"] is None
    assert header_reason(version, "TCP_LISTEN_OVERFLOW") is None
    host = host_reason("NO_SOCKET")
    if host is None or host_reason("CONSUMED") is None:
        pytest.skip("capability: the host kernel's BTF has no CONSUMED reason to differ by")
    # The same name, another number on the development kernel: names must come from the
    # running kernel (docs/probes.md).
    assert host != reasons["NO_SOCKET"]


# ----------------------------------------------------------------------------- drops


def test_drops_counts_each_datagram_to_a_closed_port_as_no_socket(probes):
    drops = probes["local"]["drops"]
    assert _sum(drops, reason="NO_SOCKET", protocol="IPv4", function="__udp4_lib_rcv") == N_CLOSED
    codes = {d["code"] for d in drops if d["reason"] == "NO_SOCKET"}
    assert codes == {probes["reasons"]["NO_SOCKET"]}


def test_drops_counts_the_rcvbuf_drops_the_kernel_counted(probes):
    rb = probes["rcvbuf"]
    dropped = rb["sent"] - rb["kept"]
    assert dropped > 0 and dropped == rb["rcvbuf_errors"], rb
    drops = probes["local"]["drops"]
    assert _sum(drops, reason="SOCKET_RCVBUFF", protocol="IPv4") == dropped, drops


def test_listen_overflow_without_the_reason_is_counter_evidence_in_the_probe(probes):
    """6.1 has no TCP_LISTEN_OVERFLOW: the overflow is in the kernel's counter, and the
    probe has no row of that name (what it shows instead is not a listen-overflow reason)."""
    assert probes["reasons"]["TCP_LISTEN_OVERFLOW"] is None
    ov = probes["overflow"]
    assert ov["overflows"] >= ov["clients"] > 0, ov
    assert not [d for d in probes["local"]["drops"] if "LISTEN" in d["reason"]]


# ----------------------------------------------------------------------------- queues, napi


def test_queues_counts_each_virtio_tx_queue(probes):
    tx = {q["queue"]: q["packets"] for q in probes["local"]["queues"]
          if q["dev"] == "eth0" and q["dir"] == "tx"}  # fmt: skip
    assert tx == dict(enumerate(PER_QUEUE)), probes["local"]["queues"]
    # virtio_net's own per-queue counters say the same
    assert probes["driver_tx"] == {f"tx{q}": n for q, n in enumerate(PER_QUEUE)}
    # and they are what `lbtune probe queues` shows for eth0 by default (source ethtool)
    assert probes["planned_sources"] == {"eth0:rx": "ethtool", "eth0:tx": "ethtool"}


def test_queues_counts_each_virtio_rx_queue_as_the_driver_does(probes):
    assert probes["rx_received"] == N_RX
    rx = {q["queue"]: q["packets"] for q in probes["remote"]["queues"]
          if q["dev"] == "eth0" and q["dir"] == "rx"}  # fmt: skip
    assert None not in rx, rx  # virtio records the queue of every packet
    assert sum(rx.values()) == N_RX
    assert {f"rx{q}": rx.get(q, 0) for q in range(4)} == probes["driver_rx"]
    assert sum(1 for n in rx.values() if n) >= 2, rx  # the flows took more than one queue


def test_napi_work_per_virtio_queue(probes):
    rx = {q["queue"]: q["packets"] for q in probes["remote"]["queues"]
          if q["dev"] == "eth0" and q["dir"] == "rx" and q["packets"]}  # fmt: skip
    work: dict[int, int] = {}
    for n in probes["remote"]["napi"]:
        assert n["dev"] == "eth0" and n["budget"] > 0
        if n["work"]:
            work[n["queue"]] = work.get(n["queue"], 0) + n["work"]
    assert work == rx


def test_queues_reads_6_1s_own_structs_as_tp_btf(probes):
    """Debian's 6.1 has BTF: the queues probe's tx and rx entries are BTF-typed tracepoints
    there (offsets from 6.1's BTF, checked by 6.1's verifier), and the counts above are
    theirs."""
    assert "net:net_dev_start_xmit" in probes["typed"], probes["typed"]
    assert [tp for tp in probes["typed"] if tp != "net:net_dev_start_xmit"], probes["typed"]


def test_every_program_loaded_and_none_is_left(probes):
    assert probes["programs"] >= 3
    assert set(probes["local"]["costs"]) == {"drops", "queues", "napi"}
    assert probes["programs_left"] == 0


def test_the_cli_counts_the_same_with_virtios_own_queue_counters(vm: VmGuest, probes) -> None:
    """`lbtune probe drops queues napi` as a user runs it: on virtio-net the tx queues come
    from the driver's counters (source ethtool), the drops from the probe."""
    got = vm.call("tests.vm.guest_probes:cli_probe", [N_CLOSED, PER_QUEUE], timeout=1800)
    assert got["code"] == 0, got["stderr"]
    doc = got["doc"]
    assert doc["stopped_by"] == "SIGINT" and doc["kernel"] == find_vm_image().version
    assert set(doc["probes"]) == {"drops", "queues", "napi"}
    udp = [d for d in doc["drops"] if (d["reason"], d["protocol"], d["function"])
           == ("NO_SOCKET", "IPv4", "__udp4_lib_rcv")]  # fmt: skip
    assert sum(d["count"] for d in udp) == N_CLOSED, doc["drops"]
    tx = {q["queue"]: q for q in doc["queues"] if q["dev"] == "eth0" and q["direction"] == "tx"}
    assert {q: r["packets"] for q, r in tx.items()} == dict(enumerate(PER_QUEUE))
    assert {r["source"] for r in tx.values()} == {"ethtool"}


# ----------------------------------------------------------------------------- diagnose


def test_diagnose_explains_a_listen_overflow_from_counters_on_6_1(vm: VmGuest) -> None:
    """tests/netns/test_diagnose_probes.py's burst, on a kernel without TCP_LISTEN_OVERFLOW:
    the probes run, and the finding's evidence is the kernel's counters only."""
    got = vm.call("tests.vm.guest_probes:diagnose_overflow", timeout=1800)
    doc, clients = got["doc"], got["clients"]
    assert doc["probes"]["status"] == "ran", doc["probes"]
    (f,) = [f for f in doc["findings"] if f["rule"] == "accept-queue-overflow"]
    counters = {e["counter"]: e["value"] for e in f["evidence"]}
    assert counters["TcpExt.ListenOverflows"] >= clients > 0
    assert not [e for e in f["evidence"] if e["source"].startswith("probe")], f["evidence"]
    assert "TCP_LISTEN_OVERFLOW" not in f["cause"]
    assert f["object"] == "tcp [::1]:18090"
