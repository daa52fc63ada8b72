"""The memoized no-op's pieces that need no kernel (the whole is proven against real IPVS
in tests/lab/test_ipvs_noop_lab.py): which command lines it may answer, and the table
digest: settings in, connection counts and statistics out, the template cut always the
same as the attribute walk."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lbtune.cli.ipvs import fast
from lbtune.environ import problem
from lbtune.host.ipvs import memo as noop
from lbtune.host.ipvs import wire as W
from lbtune.ipvs import config
from tests.unit.test_ipvs_decode_fast import body, kernel_dest


@pytest.mark.parametrize("argv,want", [
    (["ipvs", "apply", "d.toml"], ("apply", "d.toml", False)),
    (["ipvs", "apply", "d.toml", "--json"], ("apply", "d.toml", True)),
    (["ipvs", "apply", "--json", "d.toml"], ("apply", "d.toml", True)),
    (["ipvs", "apply", "d.toml", "--json", "--json"], None),
    (["ipvs", "apply", "d.toml", "-v"], None),
    (["ipvs", "apply", "--root", "/x", "d.toml"], None),
    (["ipvs", "apply", "--", "d.toml"], None),
    (["ipvs", "apply"], None),
    (["ipvs", "apply", ""], None),
    (["ipvs", "plan", "d.toml"], ("plan", "d.toml", False)),
    (["--json", "ipvs", "plan", "d.toml"], ("plan", "d.toml", True)),  # check mode's
    (["ipvs", "plan", "d.toml", "--teardown"], None),
    (["ipvs", "plan", "--teardown", "d.toml"], None),
    (["ipvs", "teardown", "d.toml"], None),
    (["ipvs", "status", "d.toml"], None),
    (["--json", "ipvs", "apply", "d.toml"], ("apply", "d.toml", True)),  # the collection's
    (["ipvs", "--json", "apply", "d.toml"], ("apply", "d.toml", True)),
    (["apply", "d.toml"], None),
    (["plan", "d.toml"], None),  # `lbtune plan PROFILE`: a host profile, not IPVS
    (["ipvs", "apply", "a.toml", "b.toml"], None),
])  # fmt: skip
def test_only_a_plain_apply_or_plan_is_answered(argv, want):
    assert fast.parse_argv(argv) == want


def test_what_the_memo_trusts_exists_and_agrees_with_the_full_run():
    for name in noop.CODE:
        assert os.path.isfile(os.path.join(noop.PKG, name)), name
    assert noop.MAX_CONFIG == config.MAX_BYTES
    assert noop.STATE_DIR == "/var/lib/lbtune"


def test_the_environment_check_is_the_cli_s():
    from lbtune.cli.main import check_environment
    from lbtune.errors import LbtuneError

    for env in ({"LBTUNE_DEBUG": "maybe"}, {"LBTUNE_STATE_DIR": "rel/dir"},
                {"LBTUNE_STATE_DIR": "/a\nb"}, {"LBTUNE_LAB_FPU": "x"}):
        assert problem(env) is not None
        with pytest.raises(LbtuneError):
            check_environment(env)
    assert problem({"LBTUNE_DEBUG": "1", "LBTUNE_STATE_DIR": "/tmp/s", "PATH": "/x"}) is None


def service_body(port: int, sched: bytes = b"wrr\0", conns_stats: int = 0) -> bytes:
    import socket
    import struct

    A = W._attr
    stats = b"".join(A(i, struct.pack("=Q", i + conns_stats)) for i in range(1, 11))
    attrs = [A(W.SVC_AF, struct.pack("=H", socket.AF_INET)),
             A(W.SVC_PROTOCOL, struct.pack("=H", 6)),
             A(W.SVC_ADDR, socket.inet_aton("10.0.0.1").ljust(16, b"\0")),
             A(W.SVC_PORT, struct.pack("!H", port)), A(W.SVC_SCHED_NAME, sched),
             A(W.SVC_FLAGS, struct.pack("=II", 2, 0xFFFFFFFF)),
             A(W.SVC_TIMEOUT, struct.pack("=I", 0)), A(W.SVC_NETMASK, struct.pack("=I", 32)),
             W._nested(W.SVC_STATS, [stats]), W._nested(12, [stats])]  # fmt: skip
    return W.GENLMSGHDR.pack(W.CMD_GET_SERVICE, 1, 0) + W._nested(W.CMD_ATTR_SERVICE, attrs)


def digest(services: list[tuple[bytes, list[bytes]]]) -> str:
    d = noop.TableDigest()
    for svc, dests in services:
        d.add(svc, dests)
    return d.hexdigest()


def dest(weight: int = 1, active: int = 0, port: int = 80, addr: str = "10.1.0.1",
         tunnel: bool = True) -> bytes:
    return body(kernel_dest(addr, 4, port, 3, weight, 0, 0, active, tunnel))


def test_connection_counts_and_statistics_are_not_in_the_digest():
    base = digest([(service_body(80), [dest(1), dest(2, addr="10.1.0.2")])])
    busy = digest([(service_body(80, conns_stats=99),
                    [dest(1, active=7), dest(2, active=1234, addr="10.1.0.2")])])
    assert busy == base


@pytest.mark.parametrize("other", [
    [(service_body(80), [dest(2), dest(2, addr="10.1.0.2")])],  # a weight
    [(service_body(80), [dest(1)])],  # a real server fewer
    [(service_body(80, b"rr\0"), [dest(1), dest(2, addr="10.1.0.2")])],  # the scheduler
    [(service_body(81), [dest(1), dest(2, addr="10.1.0.2")])],  # the port
    [(service_body(80), [dest(1), dest(2, addr="10.1.0.2")]), (service_body(81), [])],
    [(service_body(80), [dest(1), dest(2, addr="10.1.0.3")])],  # an address
])  # fmt: skip
def test_every_setting_is_in_the_digest(other):
    assert digest(other) != digest([(service_body(80), [dest(1), dest(2, addr="10.1.0.2")])])


def test_a_real_server_moved_to_another_service_changes_the_digest():
    a = digest([(service_body(80), [dest(1), dest(1, addr="10.1.0.2")]), (service_body(81), [])])
    b = digest([(service_body(80), [dest(1)]), (service_body(81), [dest(1, addr="10.1.0.2")])])
    assert a != b


@given(st.lists(st.tuples(st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1),
                          st.booleans(), st.integers(1, 65535)), min_size=1, max_size=6))
def test_the_template_cut_is_the_walk_s(rows):
    """Replies of one length are cut by a template once the first was walked; each must
    come out as a fresh walk cuts it (tunnel attributes on or off change the layout)."""
    cutter = noop.Cutter(noop.DEST_VOLATILE)
    for weight, active, tunnel, port in rows:
        raw = dest(weight, active, port, tunnel=tunnel)
        got: list[bytes] = []
        cutter.feed(raw, got.append)
        _heads, spans = noop.Cutter(noop.DEST_VOLATILE).walk(raw)
        assert b"".join(got) == b"".join(raw[s] for s in spans)
        assert weight.to_bytes(4, "little") in b"".join(got)


def test_a_reply_of_a_known_length_but_another_layout_is_walked():
    cutter = noop.Cutter(noop.DEST_VOLATILE)
    first = dest(1)
    cutter.feed(first, lambda b: None)
    # the same length, attributes in another order: the template must not be used
    attrs = kernel_dest("10.1.0.1", 4, 80, 3, 7, 0, 0, 5, True)
    attrs[3], attrs[7] = attrs[7], attrs[3]
    other = body(attrs)
    assert len(other) == len(first)
    got: list[bytes] = []
    cutter.feed(other, got.append)
    _h, spans = noop.Cutter(noop.DEST_VOLATILE).walk(other)
    assert b"".join(got) == b"".join(other[s] for s in spans)


def test_a_malformed_reply_is_a_miss_not_a_digest():
    raw = bytearray(dest(1))
    raw[8:10] = (500).to_bytes(2, "little")  # an attribute longer than the reply
    with pytest.raises(noop.Miss):
        noop.Cutter(noop.DEST_VOLATILE).feed(bytes(raw), lambda b: None)


def test_nothing_is_answered_without_root_or_for_other_commands(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert fast.try_noop(["ipvs", "apply", "/nonexistent.toml"]) is None
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    assert fast.try_noop(["ipvs", "status"]) is None


def test_a_missing_config_or_state_is_left_to_the_full_run(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setenv("LBTUNE_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.delenv("LBTUNE_ROOT", raising=False)
    monkeypatch.setattr(os, "isatty", lambda fd: False)
    assert fast.try_noop(["ipvs", "apply", str(tmp_path / "missing.toml")]) is None
    cfg = tmp_path / "d.toml"
    cfg.write_text("[director]\n")
    assert fast.try_noop(["ipvs", "apply", str(cfg), "--json"]) is None  # no state dir


def test_the_record_is_root_only_and_a_killed_write_leaves_no_temp(tmp_path):
    """A write killed mid-way (kill -9) leaves `ipvs-noop.memo.lbtune-tmp-PID`; the next
    record removes it (HostFS.write_file clears a dead writer's temp)."""
    import subprocess

    from lbtune.host.fs import HostFS

    fs = HostFS.create(str(tmp_path / "state"))
    fs.makedirs("/b/journal", 0o700)
    gone = subprocess.Popen(["true"])  # a pid that has exited
    gone.wait()
    leftover = tmp_path / "state" / "b" / f"{noop.MEMO}.lbtune-tmp-{gone.pid}"
    leftover.write_bytes(b"half")
    noop.record(fs, "/b", source="d.toml", config_sha256="0" * 64, table="1" * 64,
                modules=("6.1",), sysctls=(), timeouts=(), vips=(), local=(), unchanged=3)
    memo = tmp_path / "state" / "b" / noop.MEMO
    assert memo.stat().st_mode & 0o777 == 0o600
    assert not leftover.exists()
    dir_fd = os.open(memo.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        got = noop.load(dir_fd)  # as the check reads it: root's own, 0600
    finally:
        os.close(dir_fd)
    assert got["state"] == str(tmp_path / "state" / "b") and got["unchanged"] == 3


@pytest.mark.parametrize("source", ["d.toml", "/etc/lbtune/dr+1@x.toml"])
def test_the_memos_json_is_what_the_cli_emits_for_the_same_no_op(capfd, source):
    """The documents lbtune.cli.ipvs.commands builds for a no-op apply and plan, through emit_json,
    against the memo's hand-written ones (the lab test compares whole runs too)."""
    from lbtune.cli.output import emit_json

    docs = {
        "apply": {"config": source, "journal": None, "operations": 0, "unchanged": 41,
                  "changes": [], "cut": [], "warnings": []},
        "plan": {"config": source, "operations": 0, "unchanged": 41, "changes": [],
                 "warnings": []},
    }  # fmt: skip
    for command, doc in docs.items():
        emit_json(doc)
        want = capfd.readouterr().out
        fast.say(command, source, True, 41)
        assert capfd.readouterr().out == want, command
