"""/proc/interrupts parsing on the layouts real kernels print, and /proc/irq/N."""

from __future__ import annotations

import pathlib

import pytest

from lbtune.errors import MalformedHostFile
from lbtune.host.fs import HostFS
from lbtune.host.kernel.interrupts import (
    CpuCounts,
    parse_interrupts,
    read_interrupts,
    read_irq_affinity,
)

DATA = pathlib.Path(__file__).resolve().parent.parent / "data"
HOSTS = DATA / "hosts"
SAMPLES = DATA / "interrupts"  # see README.md there

# x86, 5.15: interrupt remapping on, CPU2 offline (the header lists online CPUs only, so the
# columns are CPU0, CPU1, CPU3). An allocated vector without a handler (26) has no action.
X86_515 = (SAMPLES / "x86-5.15-offline-cpu2.txt").read_text()

# Recorded on a 6.18 KVM guest (this project's build machine): per-device MSI-X domains name
# the chip after the PCI function and number hwirqs per device.
KVM_618 = (SAMPLES / "kvm-6.18-msix-domains.txt").read_text()

# RHEL 7 (3.10): chip and flow were printed as one word, no hwirq column.
RHEL7 = (SAMPLES / "rhel7-3.10.txt").read_text()

# arm64 (GENERIC_IRQ_SHOW_LEVEL): the trigger is a separate word, "Level"/"Edge".
ARM64 = (SAMPLES / "arm64-gicv3.txt").read_text()


def test_x86_columns_are_the_online_cpus():
    irqs = parse_interrupts(X86_515)
    assert irqs[42].counts == {0: 0, 1: 0, 3: 111111}
    assert irqs[51].counts == {0: 100, 1: 200, 3: 300}
    assert irqs[51].total == 600
    assert 2 not in irqs[0].counts


def test_x86_chips_and_actions():
    irqs = parse_interrupts(X86_515)
    assert sorted(irqs) == [
        0,
        9,
        24,
        25,
        26,
        40,
        41,
        42,
        50,
        51,
        60,
        61,
        70,
        71,
        72,
        73,
        74,
        80,
        81,
        82,
        90,
        91,
    ]
    assert (irqs[0].chip, irqs[0].actions) == ("IR-IO-APIC", ("timer",))
    assert (irqs[9].chip, irqs[9].actions) == ("IR-IO-APIC", ("acpi",))
    assert (irqs[24].chip, irqs[24].actions) == ("DMAR-MSI", ("dmar0",))
    assert irqs[25].actions == ("PCIe PME", "aerdrv")  # shared vector, two handlers
    assert irqs[26].actions == ()  # no handler
    assert irqs[40].actions == ("i40e-0000:02:00.0:misc",)
    assert irqs[81].actions == ("mlx5_comp0@pci:0000:98:00.0",)
    assert irqs[81].chip == "IR-PCI-MSI"
    assert irqs[73].actions == ("eth2-tx-0",)


def test_summary_rows_are_not_irqs():
    for text in (X86_515, KVM_618, ARM64):
        irqs = parse_interrupts(text)
        assert all(isinstance(k, int) for k in irqs)


def test_per_device_msix_chip_names():
    irqs = parse_interrupts(KVM_618)
    assert irqs[38].chip == "PCI-MSIX-0000:00:03.0"
    assert irqs[38].actions == ("virtio2-input.0",)
    assert irqs[38].counts == {0: 0, 1: 1605}
    assert irqs[24].actions == ("ACPI:Ged",)


def test_old_combined_chip_flow_word():
    irqs = parse_interrupts(RHEL7)
    assert irqs[45].chip == "IR-PCI-MSI-edge"
    assert irqs[45].actions == ("eth0-TxRx-0",)
    assert irqs[47].actions == ("eth0",)
    assert irqs[0].actions == ("timer",)


def test_arm64_level_edge_words():
    irqs = parse_interrupts(ARM64)
    assert irqs[11].chip == "GICv3"
    assert irqs[11].actions == ("arch_timer",)
    assert irqs[61].actions == ("mlx5_comp0@pci:0003:01:00.0",)
    assert irqs[61].counts == {0: 1234567, 1: 0}


def test_single_online_cpu_fixture():
    irqs = read_interrupts(HostFS(str(HOSTS / "tiny-veth-bond")))
    assert irqs[11].counts == {0: 1048211}
    assert irqs[11].actions == ("eth0",)
    assert irqs[11].chip == "IO-APIC"


def test_r750_fixture_interrupts():
    irqs = read_interrupts(HostFS(str(HOSTS / "dell-r750-mlx5-ixgbe")))
    assert len(irqs[0].counts) == 48
    assert irqs[95].actions == ("mlx5_async0@pci:0000:98:00.0",)
    assert irqs[62].actions == ("eno1",)
    assert irqs[32].actions == ("PCIe PME", "aerdrv")


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "empty file"),
        ("           CPU0       CPUx\n  0:  1  2  IO-APIC 2-edge timer\n", "bad header"),
        ("   foo     CPU0       CPU1\n", "bad header"),
        ("  0:  1  2  IO-APIC 2-edge timer\n", "bad header"),
        ("           CPU0       CPU1\ngarbage\n", "without ':'"),
        ("           CPU0       CPU1\n  5:          1\n", "fewer counters"),
        ("           CPU0       CPU1\n  5:          1   x   IO-APIC 5-edge x\n", "non-numeric"),
    ],
)
def test_malformed(text, problem):
    with pytest.raises(MalformedHostFile, match=problem) as e:
        parse_interrupts(text, "/somewhere/proc/interrupts")
    assert e.value.path == "/somewhere/proc/interrupts"


def _every_counter(text: str) -> dict[int, dict[int, int]]:
    """Each IRQ's counts with every counter converted, the plain way (the reference the
    parser's sparse reading of mostly-zero rows must equal)."""
    lines = text.splitlines()
    ids = [int(h[3:]) for h in lines[0].split()]
    out = {}
    for line in lines[1:]:
        label, _, rest = line.partition(":")
        if label.strip().isdigit():
            out[int(label)] = dict(zip(ids, map(int, rest.split()[: len(ids)])))
    return out


@pytest.mark.parametrize("path", [*sorted(SAMPLES.glob("*.txt")),
                                  *sorted(HOSTS.glob("*/proc/interrupts"))],
                         ids=lambda p: str(p.relative_to(DATA)))  # fmt: skip
def test_sparse_rows_read_as_every_counter_converted(path):
    text = path.read_text()
    parsed = parse_interrupts(text)
    assert {irq: line.counts for irq, line in parsed.items()} == _every_counter(text)
    columns = [list(line.counts) for line in parsed.values()]
    assert all(c == columns[0] for c in columns)  # every row in the header's order


SPARSE = "      CPU0 CPU1 CPU2 CPU3\n 5:  0  0  {}  0  IO-APIC 5-edge x\n"


@pytest.mark.parametrize(("word", "value"), [("7", 7), ("+7", 7), ("00", 0), ("1_0", 10)])
def test_a_sparse_row_converts_as_int_does(word, value):
    assert parse_interrupts(SPARSE.format(word))[5].counts == {0: 0, 1: 0, 2: value, 3: 0}


def test_a_sparse_row_with_a_bad_counter_is_malformed():
    with pytest.raises(MalformedHostFile, match="non-numeric"):
        parse_interrupts(SPARSE.format("x"))


@pytest.mark.parametrize("end", ["", "\n", "\r\n", "\x85"])
def test_line_ends_read_as_splitlines_reads_them(end):
    text = X86_515.rstrip("\n").replace("\n", end or "\n") + end
    assert parse_interrupts(text) == parse_interrupts(X86_515)
    with pytest.raises(MalformedHostFile, match="without ':'"):
        parse_interrupts(text + (end or "\n") * 2)  # an empty line at the end


def test_a_header_naming_a_cpu_twice_keeps_the_last_column():
    text = "      CPU0 CPU1 CPU1 CPU3\n 5:  0  4  0  0  IO-APIC 5-edge x\n"
    assert parse_interrupts(text)[5].counts == {0: 0, 1: 0, 3: 0}


def test_missing_file_reads_as_no_interrupts(tmp_path):
    assert read_interrupts(HostFS(str(tmp_path))) == {}


def test_irq_affinity_files():
    fs = HostFS(str(HOSTS / "dell-r750-mlx5-ixgbe"))
    link = read_irq_affinity(fs, 62)  # eno1's link vector: default mask, no hint
    housekeeping = frozenset({0, 1, *range(12, 26), *range(36, 48)})
    assert link.affinity == housekeeping
    assert link.effective == frozenset({0})
    assert link.hint is None  # "0000,00000000"
    assert link.node == 0
    comp5 = read_irq_affinity(fs, 101)  # mlx5_comp5: hinted to 17, moved to 41
    assert (comp5.affinity, comp5.effective, comp5.hint, comp5.node) == (
        frozenset({41}),
        frozenset({41}),
        frozenset({17}),
        1,
    )
    absent = read_irq_affinity(fs, 9999)
    assert (absent.affinity, absent.effective, absent.hint, absent.node) == (None, None, None, None)


def test_a_rows_counts_are_a_mapping_of_its_cpus_sharing_them_with_the_other_rows():
    irqs = parse_interrupts(X86_515)
    counts = irqs[51].counts
    assert list(counts) == [0, 1, 3] and len(counts) == 3
    assert counts[3] == 300 and counts.get(2) is None and 2 not in counts and 3 in counts
    assert list(counts.values()) == [100, 200, 300]
    assert list(counts.items()) == [(0, 100), (1, 200), (3, 300)]
    assert dict(counts) == {0: 100, 1: 200, 3: 300}
    with pytest.raises(KeyError):
        counts[2]
    # every row of a read, and of the next read of the same CPUs, has the same CPU tuple
    again = parse_interrupts(X86_515)
    assert irqs[42].counts.cpus is counts.cpus is again[51].counts.cpus


def test_counts_compare_as_mappings():
    a = CpuCounts.of({0: 1, 1: 2})
    assert a == {0: 1, 1: 2} and a == CpuCounts.of({0: 1, 1: 2})
    assert a == CpuCounts.of({1: 2, 0: 1})  # the same CPUs in another order
    assert a != CpuCounts.of({0: 1, 1: 3}) and a != {0: 1} and a != CpuCounts.of({0: 1})
    assert a != [1, 2]
    with pytest.raises(TypeError):
        hash(a)


def test_counts_replaced_and_picked_in_place_of_their_cpus():
    a = CpuCounts.of({4: 10, 5: 20, 6: 30})
    b = a.replaced({5: 21})
    assert dict(b) == {4: 10, 5: 21, 6: 30} and dict(a) == {4: 10, 5: 20, 6: 30}
    assert b.cpus is a.cpus
    with pytest.raises(KeyError):
        a.replaced({7: 1})
    pick = a.picker([6, 4])
    assert pick(a) == (30, 10) and pick(b) == (30, 10)
    assert a.picker([5])(b) == (21,)
    with pytest.raises(KeyError):
        a.picker([7])


def test_counts_copy_and_pickle_as_they_are():
    import copy
    import pickle

    a = parse_interrupts(X86_515)[51]
    for b in (copy.deepcopy(a), copy.copy(a), pickle.loads(pickle.dumps(a))):  # noqa: S301 (its own)
        assert b == a and dict(b.counts) == dict(a.counts) and b.total == 600


@pytest.mark.parametrize("count", ["18446744073709551616", "9223372036854775808"])
def test_a_count_beyond_64_bits_is_a_malformed_file(count):
    text = f"      CPU0 CPU1\n 5:  0  {count}  IO-APIC 5-edge x\n"
    with pytest.raises(MalformedHostFile, match="IRQ 5: counter out of range"):
        parse_interrupts(text)
