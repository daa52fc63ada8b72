"""`lbtune probe` at the command line: errors are one line with a documented exit code."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import DELL, HOSTS, fork_call, needs_root, run_cli


def test_listed_in_help():
    r = run_cli("--help")
    assert r.exit_code == 0 and "probe" in r.stdout


@pytest.mark.parametrize(
    "args, text",
    [
        (["probe"], "Missing argument"),
        (["probe", "sockets"], "'sockets' is not one of"),
        (["probe", "drops", "--duration", "soon"], "--duration 'soon'"),
        (["probe", "drops", "--duration", "-1"], "--duration"),
        (["probe", "drops", "--top", "0"], "--top"),
    ],
)
def test_bad_command_lines_exit_2(args, text):
    r = run_cli(*args)
    assert r.exit_code == 2
    assert text in r.stderr and "Traceback" not in r.stderr


def test_a_host_tree_is_not_a_running_kernel():
    r = run_cli("--root", str(HOSTS / DELL), "probe", "drops")
    assert r.exit_code == 2
    assert r.stderr.strip() == (
        "lbtune: probes run on the running kernel; --root reads recorded files"
    )


def _as_nobody(args: list[str]):  # type: ignore[no-untyped-def]
    import lbtune.cli.probe
    import lbtune.observe.probes  # noqa: F401

    os.setgroups([])
    os.setgid(65534)
    os.setuid(65534)  # for good: this is a forked child
    return run_cli(*args, isolate=False)


@needs_root  # to become another user
def test_needs_root_exit_3_with_the_fix():
    r = fork_call(_as_nobody, ["probe", "drops", "--duration", "1"])
    assert r.exit_code == 3, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "need root" in lines[0] and "run lbtune as root" in lines[0]


def _without_bcc(args: list[str]):  # type: ignore[no-untyped-def]
    sys.modules["bcc"] = None  # type: ignore[assignment]  # `import bcc` now fails
    return run_cli(*args, isolate=False)


@needs_root
def test_without_bcc_one_line_saying_what_is_missing_and_how_to_get_it(netns_name):
    r = fork_call(_without_bcc, ["--netns", netns_name, "probe", "drops", "--duration", "1"])
    assert r.exit_code == 3
    (line,) = r.stderr.strip().splitlines()
    assert "bcc Python module cannot be imported" in line and "python3-bpfcc" in line


@needs_root
@pytest.mark.parametrize("name", ["nosuch0", "../../etc", "lo/../lo", "a" * 300, "-", "lo\n"])
def test_unknown_interface_exit_2(netns_name, name):
    r = run_cli("--netns", netns_name, "probe", "queues", "--iface", name, "--print-c")
    assert r.exit_code == 2 and r.stdout == ""
    assert r.stderr.strip() == f"lbtune: --iface {name}: no such interface".strip()


def test_unknown_namespace_exit_2():
    r = run_cli("--netns", "no-such-ns-lbtune", "probe", "drops")
    assert r.exit_code in (2, 3)  # 3 when not root: entering a namespace needs root
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr


@needs_root
def test_print_c_prints_the_final_c_and_loads_nothing(netns_name):
    pytest.importorskip("bcc")
    from tests.netns.probe_traffic import lbtune_programs

    before = lbtune_programs()
    r = run_cli("--netns", netns_name, "probe", "drops", "queues", "--iface", "lo", "--print-c")
    assert r.exit_code == 0, r.stderr
    text = r.stdout
    assert text.startswith(f"/* lbtune probes drops, queues for Linux {os.uname().release}")
    assert "struct lbt_args_skb_kfree_skb {" in text and "int lbt_drops_kfree_skb(" in text
    assert "#define LBT_Q_SLOTS 2" in text  # lo: one queue + the unknown-queue slot
    assert lbtune_programs() == before


@pytest.fixture
def netns_name():  # type: ignore[no-untyped-def]
    if os.geteuid() != 0:
        pytest.skip("needs root")
    name = f"lbtune-c{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


def test_doctor_says_what_the_probes_need():
    r = run_cli("doctor", "--json", "--no-compile")
    caps = {c["name"]: c for c in r.json["capabilities"]}
    for tp in ("skb:kfree_skb", "net:napi_gro_receive_entry", "net:netif_rx_entry",
               "net:net_dev_start_xmit", "napi:napi_poll"):  # fmt: skip
        assert caps[tp]["group"] == "tracepoints"
    stats = caps["BPF run-time statistics"]
    if os.geteuid() == 0:  # the kernel's own answer: can statistics be switched on?
        from lbtune.host.trace.bpf import RunTimeStats

        probe = RunTimeStats()
        works = probe.open()
        probe.close()
        assert stats["available"] == works
