"""`lbtune --netns X apply web --yes`, verify, rollback: every value back as before."""

from __future__ import annotations

import os
import subprocess


def ns_sysctls(ns: str) -> dict[str, str]:
    """Every per-namespace sysctl of `ns`, read by `ip netns exec` (not by lbtune)."""
    code = (
        "import os, json\n"
        "out = {}\n"
        "for d, _, fs in os.walk('/proc/sys/net'):\n"
        "    for f in fs:\n"
        "        p = os.path.join(d, f)\n"
        "        try:\n"
        "            out[p] = open(p).read()\n"
        "        except OSError:\n"
        "            pass\n"
        "print(json.dumps(out))\n"
    )
    import json

    res = subprocess.run(
        ["ip", "netns", "exec", ns, "python3", "-c", code], capture_output=True, text=True,
        check=True,
    )  # fmt: skip
    return json.loads(res.stdout)


def host_globals() -> dict[str, str]:
    keys = ["fs/file-max", "vm/swappiness", "kernel/timer_migration", "net/core/somaxconn"]
    return {k: open("/proc/sys/" + k).read() for k in keys if os.path.exists("/proc/sys/" + k)}


def test_apply_verify_rollback_web_in_namespace(cli, veth4, tmp_path, monkeypatch):
    monkeypatch.setenv("LBTUNE_STATE_DIR", str(tmp_path / "state"))
    before = ns_sysctls(veth4)
    host_before = host_globals()
    r = cli("--netns", veth4, "apply", "web", "--yes", "--json")
    assert r.exit_code == 0, r.stderr
    rows = r.json["changes"]
    assert r.json["changed"] > 0
    # host-global knobs (fs.*, vm.*) are never changed from inside a namespace
    assert {c["action"] for c in rows if not c["object"].startswith("net.")} <= {"skipped"}
    during = ns_sysctls(veth4)
    assert during["/proc/sys/net/core/somaxconn"].strip() == "8192"
    assert host_globals() == host_before
    v = cli("--netns", veth4, "verify", "web")
    assert v.exit_code == 0, v.stdout + v.stderr
    v2 = cli("--netns", veth4, "verify")  # the last apply, from the journal
    assert v2.exit_code == 0, v2.stdout + v2.stderr
    rb = cli("--netns", veth4, "rollback")
    assert rb.exit_code == 0, rb.stderr
    assert ns_sysctls(veth4) == before
    assert host_globals() == host_before
