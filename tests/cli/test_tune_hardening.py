"""The tuning commands against hostile trees, foreign journals and wrong combinations
(hardening issue items 1-4, 7, 9, 14-16): each is refused with one line and changes nothing."""

from __future__ import annotations

import io
import json
import os
import pathlib
import stat
import tarfile

import pytest

from tests.conftest import DELL, KVM, copy_host, run_cli

SYSCTL_PROFILE = """[profile]
name = "{name}"
[sysctl]
"net.core.somaxconn" = {{ value = 8192, reason = "accept queue" }}
"vm.swappiness" = {{ value = 7, reason = "test" }}
"""


def files(root: pathlib.Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink() and "var/lib/lbtune" not in str(p)
    }


def profile(tmp_path: pathlib.Path, name: str = "t") -> str:
    path = tmp_path / f"{name}.toml"
    path.write_text(SYSCTL_PROFILE.format(name=name))
    return str(path)


def one_line_error(r, code: int = 2) -> str:  # type: ignore[no-untyped-def]
    assert r.exit_code == code, (r.exit_code, r.stdout, r.stderr)
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    return str(r.stderr)


# ------------------------------------------------------------------ 2: state confinement


def test_lock_symlink_in_the_tree_is_never_written_through(tmp_path, monkeypatch):
    monkeypatch.delenv("LBTUNE_STATE_DIR", raising=False)
    root = copy_host(tmp_path, KVM)
    victim = root / "etc/hostname-victim"
    victim.write_text("precious\n")
    state = root / "var/lib/lbtune"
    state.mkdir(parents=True)
    (state / "lock").symlink_to("../../../etc/hostname-victim")
    for args in (["rollback"], ["apply", profile(tmp_path)]):
        r = run_cli("--root", str(root), *args)
        assert "lock" in one_line_error(r)
        assert victim.read_text() == "precious\n"
    assert (root / "proc/sys/net/core/somaxconn").read_text() != "8192\n"


def test_state_dir_behind_a_link_out_of_the_root_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("LBTUNE_STATE_DIR", raising=False)
    root = copy_host(tmp_path, KVM)
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "var").rename(tmp_path / "var-moved") if (root / "var").exists() else None
    (root / "var").symlink_to(outside)
    before = files(root)
    r = run_cli("--root", str(root), "apply", profile(tmp_path))
    assert "outside the host root" in one_line_error(r)
    assert list(outside.iterdir()) == []
    assert files(root) == before


# ------------------------------------------------------------------ 3: --netns --persist


def test_persist_in_a_namespace_is_refused_with_the_reason(tmp_path):
    r = run_cli("--netns", "lbtune-no-such-ns", "apply", profile(tmp_path), "--persist")
    msg = one_line_error(r)
    assert "--persist cannot be used with --netns" in msg and "belong to the host" in msg


# ------------------------------------------------------------------ 4: journal identity


def test_rollback_refuses_a_journal_of_another_root(tmp_path, monkeypatch):
    monkeypatch.setenv("LBTUNE_STATE_DIR", str(tmp_path / "shared-state"))
    a = copy_host(tmp_path, KVM, dest="a")
    b = copy_host(tmp_path, KVM, dest="b")
    b_before = files(b)
    r = run_cli("--root", str(a), "apply", profile(tmp_path), "--json")
    assert r.exit_code == 0, r.stderr
    rb = run_cli("--root", str(b), "rollback")
    msg = one_line_error(rb)
    assert "not this host's" in msg and str(a) in msg
    assert files(b) == b_before
    assert run_cli("--root", str(a), "rollback").exit_code == 0


def test_journal_records_root_and_machine_identity(tmp_path, monkeypatch):
    monkeypatch.delenv("LBTUNE_STATE_DIR", raising=False)
    root = copy_host(tmp_path, KVM, files={"/etc/machine-id": "0123456789abcdef\n"})
    assert run_cli("--root", str(root), "apply", profile(tmp_path)).exit_code == 0
    (journal,) = (root / "var/lib/lbtune/journal").glob("*.json")
    data = json.loads(journal.read_text())
    assert data["root"] == os.path.realpath(root)
    assert data["machine_id"] == "0123456789abcdef"
    # the same tree under another machine-id (a copied disk on another host) is refused
    (root / "etc/machine-id").write_text("fedcba9876543210\n")
    assert "machine-id" in one_line_error(run_cli("--root", str(root), "rollback"))


# ------------------------------------------------------------------ 7: capture roots, --netns


def _capture_of(
    tmp_path: pathlib.Path, name: str = "cap", site_profile: bool = False
) -> pathlib.Path:
    """A capture tarball of the KVM fixture (with /etc/lbtune/profiles/site.toml if asked)."""
    files = {"/etc/lbtune/profiles/site.toml": SYSCTL_PROFILE.format(name="site")}
    src = copy_host(tmp_path, KVM, dest=f"{name}-src", files=files if site_profile else None)
    out = tmp_path / f"{name}.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        tar.add(src, arcname="host")
    return out


@pytest.mark.parametrize(
    "args", [["apply", "PROFILE"], ["rollback"], ["apply", "PROFILE", "--persist"]]
)
def test_capture_root_is_read_only(tmp_path, args):
    cap = _capture_of(tmp_path)
    args = [profile(tmp_path) if a == "PROFILE" else a for a in args]
    r = run_cli("--root", str(cap), *args)
    msg = one_line_error(r)
    assert "read-only" in msg and str(cap) in msg and "lbtune-root-" not in msg


@pytest.mark.parametrize(
    "cmd",
    [
        ["plan", "web"],
        ["apply", "web"],
        ["rollback"],
        ["verify", "web"],
        ["history"],
        ["show"],
        ["profile", "show", "web"],
        ["profile", "lint", "web"],
    ],
)
def test_netns_with_a_root_tree_is_rejected_everywhere(tmp_path, cmd):
    root = copy_host(tmp_path, KVM)
    r = run_cli("--netns", "lbtune-no-such-ns", "--root", str(root), *cmd)
    assert "cannot be combined" in one_line_error(r)


def test_profile_inside_a_capture_is_found_by_show_as_by_plan(tmp_path):
    cap = _capture_of(tmp_path, site_profile=True)
    for args in (["profile", "show", "site"], ["plan", "site"], ["profile", "lint", "site"]):
        r = run_cli("--root", str(cap), *args)
        assert r.exit_code in (0, 1) and "not found" not in r.stderr, (args, r.stderr)
    names = run_cli("--root", str(cap), "profile", "list", "--json").json["profiles"]
    assert "site" in {p["name"] for p in names}


def test_temp_paths_of_a_capture_never_reach_errors_or_json(tmp_path):
    cap = _capture_of(tmp_path)
    r = run_cli("--root", str(cap), "profile", "show", "no-such-profile", "--json")
    assert r.exit_code == 2
    assert "lbtune-root-" not in r.stdout + r.stderr
    assert str(cap) in r.json["error"]["message"]
    cap2 = _capture_of(tmp_path, "cap2", site_profile=True)
    for fmt in ([], ["--json"]):
        shown = run_cli("--root", str(cap2), "profile", "show", "site", *fmt)
        assert shown.exit_code == 0 and "lbtune-root-" not in shown.stdout, shown.stdout
    assert (
        str(cap2) in run_cli("--root", str(cap2), "profile", "show", "site", "--json").json["path"]
    )


# ------------------------------------------------------------------ 9: hostile input


def _tarball(path: pathlib.Path, members: list[tuple[str, str, str]]) -> pathlib.Path:
    with tarfile.open(path, "w:gz") as t:
        for kind, name, target in members:
            ti = tarfile.TarInfo(name)
            if kind == "file":
                ti.size = 2
                t.addfile(ti, io.BytesIO(b"x\n"))
            elif kind == "dir":
                ti.type = tarfile.DIRTYPE
                t.addfile(ti)
            elif kind == "hard":
                ti.type, ti.linkname = tarfile.LNKTYPE, target
                t.addfile(ti)
            else:
                ti.type, ti.linkname = tarfile.SYMTYPE, target
                t.addfile(ti)
    return path


@pytest.mark.parametrize(
    "members",
    [
        [("file", "proc/x", ""), ("file", "proc/x/sub", "")],
        [("dir", "proc/d", ""), ("file", "proc/a", ""), ("hard", "proc/d", "proc/a")],
        [("file", "proc/a", ""), ("sym", "proc/b", "a"), ("hard", "proc/b", "proc/a")],
        [("dir", "proc", ""), ("file", "proc/a", ""), ("hard", "proc/b", "proc")],
    ],
    ids=["file-then-sub", "hardlink-onto-dir", "symlink-then-hardlink", "hardlink-to-dir"],
)
def test_hostile_tarballs_are_bad_input(tmp_path, members):
    bad = _tarball(tmp_path / "bad.tar.gz", members)
    r = run_cli("--root", str(bad), "show")
    msg = one_line_error(r)
    assert "bad.tar.gz" in msg and "lbtune-root-" not in msg


def test_profile_with_2000_nested_tables_is_bad_input(tmp_path):
    deep = tmp_path / "deep.toml"
    deep.write_text("[sysctl]\nx = " + "{a = " * 2000 + "1" + "}" * 2000 + "\n")
    assert "nested too deeply" in one_line_error(run_cli("profile", "show", str(deep)))
    headers = tmp_path / "headers.toml"
    headers.write_text("[sysctl." + ".".join(["t"] * 2000) + "]\nv = 1\n")
    one_line_error(run_cli("profile", "show", str(headers)))


# ------------------------------------------------------------------ 1: capture -o


def test_capture_never_replaces_a_special_file(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link.tar.gz"
    link.symlink_to(tmp_path / "elsewhere")
    for target in (fifo, link):
        r = run_cli("capture", "-o", str(target), "--force")
        assert "refusing to replace it" in one_line_error(r)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode) and link.is_symlink()


# ------------------------------------------------------------------ 14-16: interface


def test_global_options_after_the_command(tmp_path):
    root = copy_host(tmp_path, KVM)
    assert run_cli("--root", str(root), "apply", profile(tmp_path)).exit_code == 0
    quiet = run_cli("--root", str(root), "verify")
    loud = run_cli("--root", str(root), "verify", "-v")
    assert loud.exit_code == 0 and "vm.swappiness" in loud.stdout
    assert "vm.swappiness" not in quiet.stdout
    r = run_cli("--root", str(root), "plan", "nonexistent-profile", "--debug")
    assert r.exit_code == 2 and "Traceback" in r.stderr


def test_help_lists_every_exit_code():
    text = " ".join(run_cli("--help").stdout.split())
    for code in ("0 ok", "1 findings", "2 bad input", "3 needs root", "4 a change failed",
                 "5 restoring failed", "6 another run holds the lock", "70 internal"):  # fmt: skip
        assert code in text, code


def test_misspelled_sysctl_is_an_error_naming_the_key(tmp_path):
    root = copy_host(tmp_path, KVM)
    prof = tmp_path / "typo.toml"
    prof.write_text(
        '[profile]\nname = "typo"\n[sysctl]\n"net.core.somaxcon" = { value = 8192, reason = "r" }\n'
    )
    for cmd in ("plan", "apply"):
        msg = one_line_error(run_cli("--root", str(root), cmd, str(prof)))
        assert "net.core.somaxcon" in msg and "did you mean net.core.somaxconn" in msg


def test_absent_family_is_missing_not_an_error(tmp_path):
    root = copy_host(tmp_path, KVM)
    prof = tmp_path / "ct.toml"
    prof.write_text(
        '[profile]\nname = "ct"\n[sysctl]\n"net.sctp.rto_min" = { value = 1, reason = "r" }\n'
    )
    r = run_cli("--root", str(root), "plan", str(prof), "--json")
    assert r.exit_code == 0 and r.json["changes"][0]["action"] == "missing"


def test_empty_profile_is_refused(tmp_path):
    prof = tmp_path / "empty.toml"
    prof.write_text('[profile]\nname = "empty"\ndescription = "nothing"\n')
    for cmd in (["plan"], ["apply"], ["profile", "show"]):
        assert "sets nothing" in one_line_error(run_cli(*cmd, str(prof)))


def test_profile_lint_checks_the_root_host(tmp_path):
    prof = tmp_path / "ring.toml"
    prof.write_text(
        '[profile]\nname = "ring"\n[nic.ens1f0np0]\nrings = { value = 65536, reason = "r" }\n'
    )
    r = run_cli("--root", str(copy_host(tmp_path, DELL)), "profile", "lint", str(prof), "--json")
    assert r.exit_code == 1
    assert any(f["level"] == "fail" and "driver maximum" in f["reason"] for f in r.json["findings"])
    assert set(r.json["findings"][0]) == {"level", "key", "desired", "reason"}


def test_errors_are_json_on_stdout_under_json(tmp_path):
    r = run_cli("--root", str(tmp_path / "missing"), "plan", "web", "--json")
    assert r.exit_code == 2
    err = r.json["error"]
    assert err["code"] == 2 and err["type"] == "bad-input" and "missing" in err["message"]
    usage = run_cli("plan", "--json")  # click's own usage error
    assert usage.exit_code == 2 and usage.json["error"]["type"] == "usage"


def test_json_vocabulary_of_plan_verify_history(tmp_path, monkeypatch):
    monkeypatch.delenv("LBTUNE_STATE_DIR", raising=False)
    root = copy_host(tmp_path, KVM)
    p = profile(tmp_path)
    plan = run_cli("--root", str(root), "plan", p, "--json").json
    assert {"kind", "object", "key", "current", "desired"} <= set(plan["changes"][0])
    run_cli("--root", str(root), "apply", p)
    knob = run_cli("--root", str(root), "verify", "--json").json["knobs"][0]
    assert set(knob) == {"kind", "object", "key", "current", "desired", "status"}
    hist = run_cli("--root", str(root), "history", "--json").json["journals"][0]
    assert {"kind", "object", "key", "original", "desired"} == set(hist["knobs"][0])
    shown = run_cli("--root", str(root), "profile", "show", p, "--resolved", "--json").json
    assert {"kind", "object", "key", "desired"} <= set(shown["targets"][0])
    for doc in (plan, knob, hist, shown):
        text = json.dumps(doc)
        assert '"obj"' not in text and '"ident"' not in text and '"value"' not in text


# ------------------------------------------------------------------ issue 20 item 21


def test_root_given_as_a_symlink_to_a_tree_reads_the_tree(tmp_path, monkeypatch):
    monkeypatch.setenv("LBTUNE_STATE_DIR", str(tmp_path / "state"))
    root = copy_host(tmp_path, KVM)
    link = tmp_path / "current"
    link.symlink_to(root)
    shown = run_cli("--root", str(link), "show", "--json")
    assert shown.exit_code == 0, shown.stderr
    direct = run_cli("--root", str(root), "show", "--json")
    assert shown.json["cpus"] == direct.json["cpus"]
    before = files(root)
    r = run_cli("--root", str(link), "apply", profile(tmp_path))
    assert r.exit_code == 0, r.stderr
    assert (root / "proc/sys/net/core/somaxconn").read_text() == "8192\n"
    assert run_cli("--root", str(link), "rollback").exit_code == 0
    assert files(root) == before


def test_a_journal_that_renamed_the_host_rolls_back_without_a_machine_id(tmp_path, monkeypatch):
    """A profile may no longer set kernel.hostname (issue 31, defect 6:
    tests/cli/test_profile_not_tuning.py), but an older lbtune's journal that renamed the host
    is still this host's: it rolls back on a host without machine-id. Written here the way
    that lbtune wrote it, by the engine below the profile layer."""
    from lbtune.host.host import Host
    from lbtune.tune.engine import apply_plan
    from lbtune.tune.journal import StateDir
    from lbtune.tune.knobs.sysctl import SysctlKnob
    from lbtune.tune.plan import Target, make_plan

    monkeypatch.delenv("LBTUNE_STATE_DIR", raising=False)
    root = copy_host(tmp_path, KVM)
    assert not (root / "etc/machine-id").exists()
    before = files(root)

    def rename() -> None:
        host = Host.open(str(root))
        target = Target(SysctlKnob("kernel.hostname"), "renamed", "r", "sysctl.kernel.hostname")
        assert apply_plan(host, make_plan(host, "name", [target]), StateDir(host)) is not None

    rename()
    assert (root / "proc/sys/kernel/hostname").read_text() == "renamed\n"
    rb = run_cli("--root", str(root), "rollback")
    assert rb.exit_code == 0, rb.stderr
    assert files(root) == before
    # another host's name (not one this journal set or replaced) is still refused
    rename()
    (root / "proc/sys/kernel/hostname").write_text("someone-else\n")
    assert "not this host's" in one_line_error(run_cli("--root", str(root), "rollback"))


# ------------------------------------------------------------------ issue 20 item 10


def test_apply_never_writes_through_a_hard_link_out_of_the_root(tmp_path, monkeypatch):
    monkeypatch.setenv("LBTUNE_STATE_DIR", str(tmp_path / "state"))
    root = copy_host(tmp_path, KVM)
    outside = tmp_path / "outside-somaxconn"
    attr = root / "proc/sys/net/core/somaxconn"
    outside.write_bytes(attr.read_bytes())
    attr.unlink()
    os.link(outside, attr)
    original = outside.read_bytes()
    before = files(root)
    assert run_cli("--root", str(root), "apply", profile(tmp_path)).exit_code == 0
    assert attr.read_text() == "8192\n"
    assert outside.read_bytes() == original
    assert run_cli("--root", str(root), "rollback").exit_code == 0
    assert outside.read_bytes() == original and files(root) == before


def test_a_lock_file_hard_linked_elsewhere_is_never_truncated(tmp_path, monkeypatch):
    monkeypatch.delenv("LBTUNE_STATE_DIR", raising=False)
    root = copy_host(tmp_path, KVM)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    state = root / "var/lib/lbtune"
    state.mkdir(parents=True)
    os.link(victim, state / "lock")
    for args in (["rollback"], ["apply", profile(tmp_path)]):
        assert "hard links" in one_line_error(run_cli("--root", str(root), *args))
        assert victim.read_text() == "precious\n"
    assert (root / "proc/sys/net/core/somaxconn").read_text() != "8192\n"


# ------------------------------------------------------------------ issue 20 item 11

PERSIST_PROFILE = """[profile]
name = "p"
[sysctl]
"net.core.somaxconn" = { value = 8192, reason = "accept queue" }
[nic.ens3]
txqueuelen = { value = 5000, reason = "r" }
"""


@pytest.mark.parametrize("case", ["sysctl.d-outside", "systemd-outside", "etc-is-a-file"])
def test_persistence_paths_are_checked_before_anything_changes(tmp_path, monkeypatch, case):
    monkeypatch.setenv("LBTUNE_STATE_DIR", str(tmp_path / "state"))
    root = copy_host(tmp_path, KVM)
    outside = tmp_path / "outside"
    outside.mkdir()
    if case == "sysctl.d-outside":
        (root / "etc/sysctl.d").symlink_to(outside)
    elif case == "systemd-outside":
        (root / "etc/systemd/system").mkdir(parents=True, exist_ok=True)
        (root / "etc/systemd/system").rename(tmp_path / "moved")
        (root / "etc/systemd/system").symlink_to(outside)
    else:
        (root / "etc").rename(tmp_path / "moved")
        (root / "etc").write_text("not a directory\n")
    prof = tmp_path / "p.toml"
    prof.write_text(PERSIST_PROFILE)
    before = files(root)
    r = run_cli("--root", str(root), "apply", str(prof), "--persist")
    one_line_error(r, 2)
    assert files(root) == before
    assert list(outside.iterdir()) == []
    assert not list((tmp_path / "state").rglob("*.json"))  # refused while planning: no journal


# ------------------------------------------------------------------ issue 20 item 19


@pytest.mark.parametrize("value", ["garbage", "0:VICTIM"])
def test_the_shipped_cli_has_no_test_pause_hook(tmp_path, monkeypatch, value):
    """The pause hook lives in tests/lbtune_paused.py; LBTUNE_TEST_PAUSE means nothing."""
    monkeypatch.setenv("LBTUNE_STATE_DIR", str(tmp_path / "state"))
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    monkeypatch.setenv("LBTUNE_TEST_PAUSE", value.replace("VICTIM", str(victim)))
    root = copy_host(tmp_path, KVM)
    r = run_cli("--root", str(root), "apply", profile(tmp_path))
    assert r.exit_code == 0, r.stderr
    assert victim.read_text() == "precious\n"
    assert (root / "proc/sys/net/core/somaxconn").read_text() == "8192\n"
    import lbtune

    src = pathlib.Path(lbtune.__file__).parent
    assert not [p for p in src.rglob("*.py") if "LBTUNE_TEST_PAUSE" in p.read_text()]


# ------------------------------------------------------------------ issue 20 item 17

HEAD = b'{"digest":"sha256:'


def journal_file(root: pathlib.Path) -> pathlib.Path:
    (path,) = (root / "var/lib/lbtune/journal").glob("*.json")
    return path


def body_of(raw: bytes) -> dict:  # type: ignore[type-arg]
    assert raw.startswith(HEAD), raw[:40]
    return json.loads(b"{" + raw[len(HEAD) + 66 :])


def signed(data: dict) -> bytes:  # type: ignore[type-arg]
    """A journal file as lbtune writes it (docs/tuning.md#safety: digest of the rest)."""
    import hashlib

    body = json.dumps(data, separators=(",", ":")).encode()
    return HEAD + hashlib.sha256(body).hexdigest().encode() + b'",' + body[1:]


def test_a_journal_with_its_identity_stripped_is_refused(tmp_path, monkeypatch):
    monkeypatch.delenv("LBTUNE_STATE_DIR", raising=False)
    root = copy_host(tmp_path, KVM)
    assert run_cli("--root", str(root), "apply", profile(tmp_path)).exit_code == 0
    path = journal_file(root)
    data = body_of(path.read_bytes())
    data.update(root=None, machine_id=None, hostname=None)
    path.write_bytes(signed(data))  # even with a matching digest
    assert "no identity" in one_line_error(run_cli("--root", str(root), "rollback"))
    assert (root / "proc/sys/net/core/somaxconn").read_text() == "8192\n"


@pytest.mark.parametrize("edit", ["setuid-mode", "flipped-byte", "truncated"])
def test_an_edited_or_corrupted_journal_is_refused_not_replayed(tmp_path, monkeypatch, edit):
    monkeypatch.delenv("LBTUNE_STATE_DIR", raising=False)
    root = copy_host(tmp_path, KVM)
    assert run_cli("--root", str(root), "apply", profile(tmp_path), "--persist").exit_code == 0
    conf = root / "etc/sysctl.d/60-lbtune.conf"
    applied = conf.read_bytes()
    path = journal_file(root)
    raw = path.read_bytes()
    if edit == "setuid-mode":
        text = raw.decode()
        assert '"original_b64":null,"mode":null' in text
        text = text.replace('"original_b64":null,"mode":null',
                            '"original_b64":"IyBldmlsCg==","mode":2559')  # fmt: skip
        path.write_text(text)
    elif edit == "flipped-byte":
        i = raw.index(b"8192")
        path.write_bytes(raw[:i] + b"9" + raw[i + 1 :])
    else:
        path.write_bytes(raw[: len(raw) // 2])
    msg = one_line_error(run_cli("--root", str(root), "rollback"))
    assert "digest" in msg or "unreadable journal" in msg, msg
    assert conf.read_bytes() == applied and stat.S_IMODE(conf.stat().st_mode) == 0o644
    assert (root / "proc/sys/net/core/somaxconn").read_text() == "8192\n"


def test_a_journal_without_a_digest_is_listed_but_never_restored(tmp_path, monkeypatch):
    monkeypatch.delenv("LBTUNE_STATE_DIR", raising=False)
    root = copy_host(tmp_path, KVM)
    assert run_cli("--root", str(root), "apply", profile(tmp_path)).exit_code == 0
    path = journal_file(root)
    path.write_text(json.dumps(body_of(path.read_bytes())))  # as lbtune wrote it before
    hist = run_cli("--root", str(root), "history", "--json")
    assert hist.exit_code == 0 and hist.json["journals"][0]["state"] == "applied"
    assert hist.json["journals"][0]["verified"] is False
    msg = one_line_error(run_cli("--root", str(root), "rollback"))
    assert "no digest" in msg and str(path) in msg and "move it away" in msg
    assert (root / "proc/sys/net/core/somaxconn").read_text() == "8192\n"


def test_a_shared_state_dir_keeps_each_roots_journals_apart(tmp_path, monkeypatch):
    monkeypatch.setenv("LBTUNE_STATE_DIR", str(tmp_path / "shared-state"))
    a = copy_host(tmp_path, KVM, dest="a")
    b = copy_host(tmp_path, KVM, dest="b")
    a_before, b_before = files(a), files(b)
    assert run_cli("--root", str(a), "apply", profile(tmp_path)).exit_code == 0
    assert run_cli("--root", str(b), "apply", profile(tmp_path)).exit_code == 0  # newer
    rb = run_cli("--root", str(a), "rollback")
    assert rb.exit_code == 0, rb.stderr
    assert files(a) == a_before and files(b) != b_before
    assert run_cli("--root", str(b), "rollback").exit_code == 0 and files(b) == b_before


def test_journals_are_ordered_by_sequence_not_by_the_clock(tmp_path, monkeypatch):
    import time

    monkeypatch.delenv("LBTUNE_STATE_DIR", raising=False)
    root = copy_host(tmp_path, KVM)
    first = tmp_path / "first.toml"
    first.write_text('[profile]\nname = "first"\n[sysctl]\n'
                     '"net.core.somaxconn" = { value = 8192, reason = "r" }\n')  # fmt: skip
    second = tmp_path / "second.toml"
    second.write_text('[profile]\nname = "second"\n[sysctl]\n'
                      '"vm.swappiness" = { value = 7, reason = "r" }\n')  # fmt: skip
    assert run_cli("--root", str(root), "apply", str(first)).exit_code == 0
    real_gmtime = time.gmtime
    monkeypatch.setattr(time, "gmtime", lambda *a: real_gmtime(86400))  # a boot before NTP
    assert run_cli("--root", str(root), "apply", str(second)).exit_code == 0
    monkeypatch.setattr(time, "gmtime", real_gmtime)
    hist = run_cli("--root", str(root), "history", "--json").json["journals"]
    assert [j["profile"] for j in hist] == ["first", "second"]
    swappiness = (root / "proc/sys/vm/swappiness").read_text()
    assert swappiness == "7\n"
    rb = run_cli("--root", str(root), "rollback")  # the newest: the second
    assert rb.exit_code == 0 and "second" in rb.stdout, rb.stdout
    assert (root / "proc/sys/vm/swappiness").read_text() != "7\n"
    assert (root / "proc/sys/net/core/somaxconn").read_text() == "8192\n"
