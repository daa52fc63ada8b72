"""The netns tier's guard against module loads on the host (tests/netns/conftest.py)."""

from __future__ import annotations

from tests.netns.conftest import HOST_MODULES_OF_THE_TIER, loaded_modules, new_host_modules

PROC_MODULES = """\
veth 40960 0 - Live 0x0000000000000000
nf_conntrack 188416 1 act_ct, Live 0x0000000000000000
act_ct 28672 0 - Live 0x0000000000000000
"""


def test_loaded_modules_reads_proc_modules(tmp_path):
    path = tmp_path / "modules"
    path.write_text(PROC_MODULES)
    assert loaded_modules(str(path)) == {"veth", "nf_conntrack", "act_ct"}
    assert loaded_modules(str(tmp_path / "absent")) == frozenset()  # no loadable modules


def test_a_conntrack_load_is_caught_and_the_tiers_own_links_are_not():
    before = frozenset({"ext4"})
    after = before | {"veth", "bridge", "stp", "llc", "nf_conntrack", "nf_tables", "nft_ct",
                      "act_ct"}  # fmt: skip
    assert new_host_modules(before, after) == ["act_ct", "nf_conntrack", "nf_tables", "nft_ct"]
    assert new_host_modules(after, after) == []
    assert not {"nf_conntrack", "nf_tables", "nft_ct", "act_ct", "ip_vs"} & HOST_MODULES_OF_THE_TIER
