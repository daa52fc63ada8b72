"""Loading profiles: every shipped profile, search order, includes, and refusals."""

from __future__ import annotations

import pathlib

import pytest

from lbtune.errors import BadInput
from lbtune.tune.plan import Mode
from lbtune.tune.profile import (
    list_profiles,
    load_profile,
    parse_profile_text,
    shipped_profiles_dir,
)

SHIPPED = ["base", "web", "lb-dr", "lb-proxy", "realserver-dr", "loadgen", "l2dsr-bmt-runbook"]


def test_shipped_dir_is_the_source_tree() -> None:
    d = shipped_profiles_dir()
    assert d is not None
    assert d == pathlib.Path(__file__).resolve().parents[3] / "profiles"


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_profile_loads(name: str) -> None:
    p = load_profile(name)
    assert p.name == name
    assert p.description
    assert p.chain[-1] == name
    for key, s in p.settings():
        if not key.startswith("cpu."):
            assert s.reason, key
        assert "\n" not in s.reason


def test_list_profiles_lists_the_shipped_ones() -> None:
    infos = {i.name: i for i in list_profiles()}
    assert set(SHIPPED) <= set(infos)
    assert all(i.error is None for i in infos.values())
    assert infos["lb-dr"].role == "lb-dr"
    assert infos["realserver-dr"].include == ("web",)


def test_inheritance_chain_and_roles() -> None:
    rs = load_profile("realserver-dr")
    assert rs.chain == ("base", "web", "realserver-dr")
    assert rs.role == "realserver"
    # base's value, overridden by web
    assert rs.sysctl["net.core.somaxconn"].value == "8192"
    assert rs.sysctl["net.core.somaxconn"].source.endswith("web.toml")
    # inherited from base untouched
    assert rs.sysctl["net.ipv4.tcp_syncookies"].value == "1"
    assert rs.sysctl["net.ipv4.conf.{data}.arp_ignore"].value == "1"
    assert rs.needs_iface


def test_include_order_later_values_override(tmp_path: pathlib.Path, write_profile) -> None:
    write_profile(
        "a",
        '[sysctl]\n"vm.swappiness" = { value = 1, reason = "a" }\n'
        '"net.core.somaxconn" = { value = 100, reason = "a" }\n',
    )
    write_profile("b", '[sysctl]\n"vm.swappiness" = { value = 2, reason = "b", mode = "lower" }\n')
    top = write_profile(
        "top",
        '[profile]\ninclude = ["a", "b"]\n[sysctl]\n'
        '"net.core.somaxconn" = { value = 300, reason = "top" }\n',
    )
    p = load_profile(str(top), search=[tmp_path])
    assert p.chain == ("a", "b", "top")
    assert p.sysctl["vm.swappiness"].value == "2"
    assert p.sysctl["vm.swappiness"].mode is Mode.LOWER
    assert p.sysctl["vm.swappiness"].reason == "b"
    assert p.sysctl["net.core.somaxconn"].value == "300"


def test_diamond_include_merges_each_file_once(tmp_path: pathlib.Path, write_profile) -> None:
    write_profile("root", '[sysctl]\n"vm.swappiness" = { value = 1, reason = "root" }\n')
    write_profile(
        "left",
        '[profile]\ninclude = ["root"]\n[sysctl]\n"vm.swappiness" = { value = 5, reason = "l" }\n',
    )
    write_profile("right", '[profile]\ninclude = ["root"]\n')
    top = write_profile("top", '[profile]\ninclude = ["left", "right"]\n')
    p = load_profile(str(top), search=[tmp_path])
    assert p.chain == ("root", "left", "right", "top")
    assert p.sysctl["vm.swappiness"].value == "5"  # root is not re-applied after left


def test_nic_defaults_and_sections_merge(tmp_path: pathlib.Path, write_profile) -> None:
    write_profile(
        "a",
        '[nic]\nrings = { value = "max", reason = "d" }\n'
        '[nic."data"]\nchannels = { value = 4, reason = "a" }\n',
    )
    top = write_profile(
        "top", '[profile]\ninclude = ["a"]\n[nic."data"]\nchannels = { value = 8, reason = "t" }\n'
    )
    p = load_profile(str(top), search=[tmp_path])
    assert p.nic[""]["rings"].value == "max"
    assert p.nic["data"]["channels"].value == 8


def test_nic_defaults_without_any_section_are_refused(tmp_path: pathlib.Path,
                                                      write_profile) -> None:  # fmt: skip
    """`[nic] rings = ...` alone applies to no interface: refused, not a silent no-op; with
    an included profile that has sections it is a default for them."""
    alone = write_profile("alone", '[nic]\nrings = { value = "max", reason = "r" }\n')
    with pytest.raises(BadInput, match=r'nic\.rings: a default .* e\.g\. \[nic\."data"\]'):
        load_profile(str(alone), search=[tmp_path])
    write_profile("base2", '[nic."data"]\nchannels = { value = 4, reason = "a" }\n')
    top = write_profile("top2", '[profile]\ninclude = ["base2"]\n'
                        '[nic]\nrings = { value = 1024, reason = "r" }\n')  # fmt: skip
    assert load_profile(str(top), search=[tmp_path]).nic[""]["rings"].value == 1024


@pytest.mark.parametrize(
    "files, start, loop",
    [
        ({"a": ["a"]}, "a", "a -> a"),
        ({"a": ["b"], "b": ["a"]}, "a", "a -> b -> a"),
        ({"a": ["b"], "b": ["c"], "c": ["b"]}, "a", "b -> c -> b"),
    ],
)
def test_include_cycles_are_refused(tmp_path, write_profile, files, start, loop) -> None:
    for name, inc in files.items():
        write_profile(name, f"[profile]\ninclude = {inc!r}\n".replace("'", '"'))
    with pytest.raises(BadInput, match="include cycle") as e:
        load_profile(start, search=[tmp_path])
    assert loop in str(e.value)
    assert "\n" not in str(e.value)


def test_etc_profiles_shadow_shipped_ones(tmp_path: pathlib.Path) -> None:
    etc = tmp_path / "etc" / "lbtune" / "profiles"
    etc.mkdir(parents=True)
    (etc / "web.toml").write_text(
        '[profile]\ndescription = "site web"\ninclude = ["base"]\n'
        '[sysctl]\n"net.core.somaxconn" = { value = 1024, mode = "raise", reason = "site" }\n'
    )
    p = load_profile("web", root=str(tmp_path))
    assert p.description == "site web"
    assert p.chain == ("base", "web")  # base still comes from the shipped directory
    assert p.sysctl["net.core.somaxconn"].value == "1024"
    infos = {i.name: i for i in list_profiles(root=str(tmp_path))}
    assert infos["web"].path == str(etc / "web.toml")


def test_broken_profile_listed_with_error(tmp_path: pathlib.Path, write_profile) -> None:
    write_profile(
        "ok",
        '[profile]\ndescription = "fine"\n'
        '[sysctl]\n"vm.swappiness" = { value = 1, reason = "r" }\n',
    )
    write_profile("bad", "[sysctl\n")
    write_profile("empty", '[profile]\ndescription = "sets nothing"\n')
    infos = {i.name: i for i in list_profiles(search=[tmp_path])}
    assert infos["ok"].error is None
    assert infos["bad"].error is not None and "bad.toml:1" in infos["bad"].error
    assert infos["empty"].error is not None and "sets nothing" in infos["empty"].error


def _bad(text: str) -> str:
    with pytest.raises(BadInput) as e:
        parse_profile_text(text, "x.toml", "x")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("x.toml")
    return msg


@pytest.mark.parametrize(
    "text, needle",
    [
        ('[sysctl]\n"net.core.somaxconn" = { value = 1, reason = "a" \n', "x.toml:2: invalid TOML"),
        ("[profile]\nname = 'x'\n\n[sysctl]\na = = 1\n", "x.toml:5: invalid TOML"),
        ("[bogus]\n", "unknown section [bogus]"),
        ("[profile]\nfoo = 1\n", "profile.foo"),
        ('[profile]\nname = "other"\n', "does not match the file name"),
        ('[profile]\ninclude = ["../etc/passwd"]\n', "profile.include"),
        ('[profile]\nrole = "lb-xx"\n', "profile.role"),
        ('[sysctl]\n"net.core.somaxconn" = 4096\n', "needs a one-line reason"),
        ('[sysctl]\n"net.core.somaxconn" = { value = 4096 }\n', "missing reason"),
        ('[sysctl]\n"net.core.somaxconn" = { value = 4096, reason = "" }\n', "reason"),
        (
            '[sysctl]\n"net.core.somaxconn" = { value = 1, reason = "a\\nb" }\n',
            "one printable line",
        ),
        (
            '[sysctl]\n"net.core.somaxconn" = { value = 1, reason = "r", extra = 2 }\n',
            "unknown field",
        ),
        ('[sysctl]\n"net.core.somaxconn" = { value = 1, reason = "r", mode = "up" }\n', "mode"),
        ('[sysctl]\n"net..core" = { value = 1, reason = "r" }\n', "not a dotted sysctl name"),
        ('[sysctl]\n"../../etc/shadow" = { value = 1, reason = "r" }\n', "sysctl key"),
        ('[sysctl]\n"net/core/somaxconn" = { value = 1, reason = "r" }\n', "sysctl key"),
        ('[sysctl]\n"kernel.core_pattern" = { value = "|/bin/sh", reason = "r" }\n', "never sets"),
        ('[sysctl]\n"net.core.{iface}.x" = { value = 1, reason = "r" }\n', "placeholder"),
        ('[sysctl]\n"net.core.{data}" = { value = 1, reason = "r" }\n', "{data} may only"),
        ('[sysctl]\n"vm.swappiness" = { value = 201, reason = "r" }\n', "out of range 0..200"),
        (
            '[sysctl]\n"net.ipv4.conf.eth0.rp_filter" = { value = 3, reason = "r" }\n',
            "out of range 0..2",
        ),
        ('[sysctl]\n"vm.swappiness" = { value = true, reason = "r" }\n', "integer or a string"),
        ('[sysctl]\n"vm.swappiness" = { value = 1.5, reason = "r" }\n', "integer or a string"),
        (
            '[sysctl]\n"net.ipv4.ip_local_port_range" = { value = "60000 1024", reason = "r" }\n',
            "must not decrease",
        ),
        (
            '[sysctl]\n"net.ipv4.ip_local_port_range" = { value = "1024", reason = "r" }\n',
            "expected 2 integers",
        ),
        (
            '[sysctl]\n"net.ipv4.tcp_rmem" = { value = "4096 x 1", reason = "r" }\n',
            "expected 3 integers",
        ),
        (
            '[sysctl]\n"net.core.default_qdisc" = { value = "fq", mode = "raise", reason = "r" }\n',
            "needs numbers",
        ),
        ('[nic."data"]\nrings = { value = 0, reason = "r" }\n', "out of range"),
        (
            '[nic."data"]\nrings = { value = "biggest", reason = "r" }\n',
            "expected a number or 'max'",
        ),
        (
            '[nic."data"]\nchannels = { value = "cpus", mode = "raise", reason = "r" }\n',
            "needs a number",
        ),
        ('[nic."data"]\nmtu = { value = 9000, reason = "r" }\n', "unknown key"),
        ('[nic."bad/name"]\nrings = { value = "max", reason = "r" }\n', "interface name"),
        ('[nic."data"]\nirq_affinity = { strategy = "list", reason = "r" }\n', "needs cpus"),
        ('[nic."data"]\nirq_affinity = { strategy = "spread", reason = "r" }\n', "strategy"),
        (
            '[nic."data"]\nirq_affinity = { strategy = "local", skip_smt = "yes", reason = "r" }\n',
            "true or false",
        ),
        ('[nic."data"]\nrps = { flow_cnt = 1000, reason = "r" }\n', "power of two"),
        ('[nic."data"]\nrps = { reason = "r" }\n', "cpus and/or flow_cnt"),
        ('[nic."data"]\nxps = { value = "all", reason = "r" }\n', "match-irqs"),
        ('[cpu]\nnic-local = "0-3"\n', "lower case"),
        ('[cpu]\nonline = "0-3"\n', "built-in"),
        ('[cpu]\nd = "0-3 +"\n', "CPU expression"),
        ('[cpu]\nd = "import os"\n', "CPU expression"),
        ('[irqbalance]\nstate = { value = "off", reason = "r" }\n', "running, stopped"),
        (
            '[irqbalance]\nstate = { value = "stopped", reason = "r" }\n'
            'ban = { value = "0", reason = "r" }\n',
            "no effect",
        ),
        ('[cmdline]\nisolcpus = { value = "2-3", flags = ["bogus"], reason = "r" }\n', "flags"),
        ('[cmdline]\nmitigations = { value = "off", reason = "r" }\n', "unknown key"),
        ('[governor]\nall = { value = "turbo", reason = "r" }\n', "governor"),
    ],
)
def test_malformed_profiles_are_refused_in_one_line(text: str, needle: str) -> None:
    assert needle in _bad(text)


def test_unknown_cpu_name_is_refused_at_load(tmp_path: pathlib.Path, write_profile) -> None:
    p = write_profile("x", '[irqbalance]\nban = { value = "data_cpus", reason = "r" }\n')
    with pytest.raises(BadInput, match="unknown CPU set 'data_cpus'"):
        load_profile(str(p), search=[tmp_path])


def test_cpu_definition_loops_are_refused(tmp_path: pathlib.Path, write_profile) -> None:
    p = write_profile("x", '[cpu]\na = "b + 1"\nb = "a"\n')
    with pytest.raises(BadInput, match="definitions loop"):
        load_profile(str(p), search=[tmp_path])


def test_housekeeping_may_refine_the_builtin(tmp_path: pathlib.Path, write_profile) -> None:
    p = write_profile("x", '[cpu]\nhousekeeping = "housekeeping & 0-3"\n')
    assert load_profile(str(p), search=[tmp_path]).cpu["housekeeping"].value == "housekeeping & 0-3"


def test_nested_sysctl_tables_are_dotted_keys() -> None:
    p = parse_profile_text(
        '[sysctl.net.core]\nsomaxconn = { value = 1024, reason = "r" }\n', "x.toml", "x"
    )
    assert list(p.sysctl) == ["net.core.somaxconn"]


def test_missing_profile_and_bad_names(tmp_path: pathlib.Path) -> None:
    with pytest.raises(BadInput, match="not found"):
        load_profile("nope", search=[tmp_path])
    with pytest.raises(BadInput, match="no such file"):
        load_profile(str(tmp_path / "nope.toml"))
    with pytest.raises(BadInput, match="not a profile name"):
        load_profile("-rf", search=[tmp_path])


def test_a_profile_that_is_not_a_regular_file_is_refused(tmp_path: pathlib.Path) -> None:
    """A FIFO must not block the read: the search skips it, and the reader itself refuses
    it (its check and its read are one open, so a file swapped in between is caught)."""
    import os

    os.mkfifo(tmp_path / "fifo.toml")
    with pytest.raises(BadInput, match="not found"):
        load_profile("fifo", search=[tmp_path])
    from lbtune.host.textfile import read_user_text

    with pytest.raises(BadInput, match=r"fifo\.toml: cannot read profile: not a regular file"):
        read_user_text(str(tmp_path / "fifo.toml"), 100, "profile")


def test_non_utf8_and_oversized_files(tmp_path: pathlib.Path) -> None:
    (tmp_path / "bin.toml").write_bytes(b"\xff\xfe[sysctl]\n")
    with pytest.raises(BadInput, match="not UTF-8"):
        load_profile("bin", search=[tmp_path])
    (tmp_path / "big.toml").write_text("#" * (1 << 20) + "x\n")
    with pytest.raises(BadInput, match="larger than"):
        load_profile("big", search=[tmp_path])


def test_as_dict_and_to_text() -> None:
    p = load_profile("lb-dr")
    d = p.as_dict()
    assert d["chain"] == ["base", "lb-dr"] and d["needs_iface"] is True
    keys = [s["key"] for s in d["settings"]]
    assert "sysctl.kernel.timer_migration" in keys and "nic.data.irq_affinity" in keys
    text = p.to_text()
    assert "sysctl.kernel.timer_migration = 0" in text
    assert "[base.toml]" in text
