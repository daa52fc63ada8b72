"""Hypothesis: the profile loader and the CPU expression parser never raise anything but
BadInput (no tracebacks) and never write to the host."""

from __future__ import annotations

import contextlib
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lbtune.errors import BadInput
from lbtune.host.fs import HostFS
from lbtune.host.host import Host
from lbtune.host.inventory import HostInventory, discover_host
from lbtune.host.kernel.cpulist import parse_cpulist
from lbtune.tune.lint import lint_profile
from lbtune.tune.profile import (
    CpuExpr,
    CpuLit,
    CpuName,
    CpuOp,
    eval_cpu_expr,
    parse_cpu_expr,
    parse_profile_data,
    parse_profile_text,
    resolve,
)
from tests.conftest import DELL, HOSTS

_INV: list[HostInventory] = []


def inventory() -> HostInventory:
    if not _INV:
        _INV.append(discover_host(Host.open(str(HOSTS / DELL))))
    return _INV[0]


FUZZ = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(autouse=True)
def no_writes(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        pytest.fail(f"profile code wrote to the host: {args[1:]!r}")

    for name in ("write_attr", "write_file", "remove_file"):
        monkeypatch.setattr(HostFS, name, refuse)


# Words that make random structures reach deep into the validators.
WORDS = [
    "profile",
    "sysctl",
    "nic",
    "cpu",
    "irqbalance",
    "cmdline",
    "governor",
    "name",
    "include",
    "role",
    "notes",
    "description",
    "value",
    "reason",
    "mode",
    "raise",
    "lower",
    "set",
    "data",
    "rings",
    "channels",
    "txqueuelen",
    "irq_affinity",
    "rps",
    "xps",
    "strategy",
    "cpus",
    "skip_smt",
    "use_hint",
    "flow_cnt",
    "max",
    "match-irqs",
    "none",
    "same",
    "local",
    "list",
    "isolated",
    "state",
    "ban",
    "stopped",
    "running",
    "isolcpus",
    "nohz_full",
    "irqaffinity",
    "flags",
    "managed_irq",
    "all",
    "performance",
    "housekeeping",
    "nic-local",
    "online",
    "data_cpus",
    "nic-local - housekeeping",
    "0-3",
    "2-11,26-35",
    "node1",
    "lb-dr",
    "web",
    "net.core.somaxconn",
    "net.ipv4.ip_forward",
    "net.ipv4.conf.{data}.rp_filter",
    "net.ipv4.ip_local_port_range",
    "1024 65535",
    "ens1f0np0",
    "eno1",
    "fuzz",
    "../x",
    "",
]
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True),
    st.sampled_from(WORDS),
    st.text(max_size=20),
)
keys = st.one_of(st.sampled_from(WORDS), st.text(max_size=12))
structures = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(keys, inner, max_size=5),
    ),
    max_leaves=30,
)
# Mostly well-formed top levels: known sections holding random tables.
documents = st.one_of(
    structures,
    st.dictionaries(
        st.sampled_from(WORDS[:7]), st.dictionaries(keys, structures, max_size=5), max_size=5
    ),
)


# Profile-shaped documents: mostly valid entries with plausible and hostile values, so that
# many of them get through validation and exercise resolve() and lint.
reason = st.one_of(st.just("why"), st.text(max_size=5))
exprs_text = st.sampled_from(
    [
        "0-3",
        "nic-local - housekeeping",
        "data_cpus",
        "isolated",
        "online",
        "all",
        "node1",
        "housekeeping & 0-1",
        "0-63",
        "40-60",
        "nic-local + isolated",
        "(0-1)",
        "x",
        "0-3 -",
    ]
)
sysctl_values = st.one_of(
    st.integers(-5, 2**33), st.sampled_from(["1024 65535", "4096 131072 16777216", "fq", "0"])
)


def _entry(
    value: st.SearchStrategy[Any], **optional: st.SearchStrategy[Any]
) -> st.SearchStrategy[Any]:
    return st.fixed_dictionaries({"value": value, "reason": reason}, optional=optional)


modes = st.sampled_from(["set", "raise", "lower", "bogus"])
nic_section = st.fixed_dictionaries(
    {},
    optional={
        "rings": _entry(
            st.one_of(st.sampled_from(["max", "min"]), st.integers(0, 70000)), mode=modes
        ),
        "channels": _entry(st.one_of(st.just("cpus"), st.integers(0, 100)), mode=modes),
        "txqueuelen": _entry(st.integers(0, 2_000_000), mode=modes),
        "irq_affinity": st.fixed_dictionaries(
            {
                "strategy": st.sampled_from(["local", "list", "isolated", "spread"]),
                "reason": reason,
            },
            optional={"cpus": exprs_text, "skip_smt": st.booleans(), "use_hint": st.booleans()},
        ),
        "rps": st.fixed_dictionaries(
            {"reason": reason},
            optional={
                "cpus": st.one_of(st.sampled_from(["same", "local", "none"]), exprs_text),
                "flow_cnt": st.sampled_from([0, 1, 3, 4096, 1 << 21]),
            },
        ),
        "xps": _entry(st.sampled_from(["match-irqs", "none", "all"])),
    },
)
profile_like = st.fixed_dictionaries(
    {},
    optional={
        "profile": st.fixed_dictionaries(
            {},
            optional={
                "role": st.sampled_from(["lb-dr", "lb-proxy", "web", "x"]),
                "description": st.text(max_size=10),
            },
        ),
        "sysctl": st.dictionaries(
            st.sampled_from(
                [
                    "net.core.somaxconn",
                    "net.ipv4.ip_forward",
                    "net.ipv4.conf.{data}.rp_filter",
                    "net.ipv4.ip_local_port_range",
                    "net.ipv4.tcp_rmem",
                    "vm.swappiness",
                    "net.core.netdev_budget",
                    "net.ipv4.tcp_tw_recycle",
                    "a..b",
                    "kernel.core_pattern",
                ]
            ),
            _entry(sysctl_values, mode=modes),
            max_size=5,
        ),
        "nic": st.dictionaries(
            st.sampled_from(["data", "eno1", "ens1f0np0", "lo", "eth9"]), nic_section, max_size=3
        ),
        "cpu": st.dictionaries(
            st.sampled_from(["data_cpus", "housekeeping", "a"]), exprs_text, max_size=3
        ),
        "irqbalance": st.fixed_dictionaries(
            {},
            optional={
                "state": _entry(st.sampled_from(["running", "stopped"])),
                "ban": _entry(exprs_text),
            },
        ),
        "cmdline": st.dictionaries(
            st.sampled_from(["isolcpus", "nohz_full", "rcu_nocbs", "irqaffinity"]),
            _entry(exprs_text, flags=st.lists(st.sampled_from(["domain", "managed_irq", "x"]))),
            max_size=3,
        ),
        "governor": st.dictionaries(
            exprs_text, _entry(st.sampled_from(["performance", "turbo"])), max_size=2
        ),
    },
)


def _exercise(profile_data: Any) -> None:
    try:
        p = parse_profile_data(profile_data, "fuzz.toml", "fuzz")
    except BadInput:
        return
    inv = inventory()
    for iface in (None, "ens1f0np0"):
        with contextlib.suppress(BadInput):
            resolve(p, inv, iface)
    lint_profile(p)
    lint_profile(p, inv, "ens1f0np0")


@FUZZ
@given(documents)
def test_random_structures_only_raise_bad_input(data: Any) -> None:
    _exercise(data)


@FUZZ
@given(profile_like)
def test_profile_shaped_documents_only_raise_bad_input(data: Any) -> None:
    _exercise(data)


LINES = [
    "[profile]",
    "[sysctl]",
    "[nic]",
    '[nic."data"]',
    "[nic.eno1]",
    "[cpu]",
    "[irqbalance]",
    "[cmdline]",
    "[governor]",
    "[sysctl.net.core]",
    "[[sysctl]]",
    "[bogus]",
    'name = "fuzz"',
    'include = ["base"]',
    'role = "lb-dr"',
    'description = "d"',
    '"net.core.somaxconn" = { value = 4096, reason = "r" }',
    '"net.core.somaxconn" = 4096',
    '"net.ipv4.ip_forward" = { value = 0, reason = "r" }',
    '"net.ipv4.tcp_rmem" = { value = "4096 131072 16777216", mode = "raise", reason = "r" }',
    '"net.ipv4.conf.{data}.arp_ignore" = { value = 1, reason = "r" }',
    'somaxconn = { value = 1, reason = "r" }',
    'rings = { value = "max", reason = "r" }',
    'rings = { value = 2047, mode = "raise", reason = "r" }',
    'channels = { value = "cpus", reason = "r" }',
    'irq_affinity = { strategy = "list", cpus = "data_cpus", skip_smt = true, reason = "r" }',
    'irq_affinity = { strategy = "local", reason = "r" }',
    'rps = { cpus = "same", flow_cnt = 4096, reason = "r" }',
    'xps = { value = "match-irqs", reason = "r" }',
    'data_cpus = "nic-local - housekeeping"',
    'housekeeping = "0-1"',
    'state = { value = "stopped", reason = "r" }',
    'ban = { value = "data_cpus + isolated", reason = "r" }',
    'isolcpus = { value = "0-12", flags = ["domain"], reason = "r" }',
    'all = { value = "performance", reason = "r" }',
    "a = = 1",
    "x = {",
    '"',
    "= 3",
    "[",
    "\x00",
    "value = 1e400",
    "key = 0x10",
]


@FUZZ
@given(st.lists(st.one_of(st.sampled_from(LINES), st.text(max_size=30)), max_size=14))
def test_toml_ish_text_only_raises_bad_input(lines: list[str]) -> None:
    text = "\n".join(lines)
    try:
        p = parse_profile_text(text, "fuzz.toml", "fuzz")
    except BadInput as e:
        assert "\n" not in str(e) and str(e).startswith("fuzz.toml")
        return
    _exercise_profile(p)


def _exercise_profile(p: Any) -> None:
    inv = inventory()
    for iface in (None, "ens1f0np0", "eno1"):
        with contextlib.suppress(BadInput):
            resolve(p, inv, iface)
    lint_profile(p, inv, "ens1f0np0")


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes_only_raise_bad_input(raw: bytes) -> None:
    with contextlib.suppress(BadInput):
        parse_profile_text(raw.decode("utf-8", errors="replace"), "fuzz.toml", "fuzz")


# ----------------------------------------------------------------- CPU expressions

ENV = {
    "online": frozenset(range(48)),
    "isolated": frozenset([*range(2, 12), *range(26, 36)]),
    "nic-local": frozenset([*range(12, 24), *range(36, 48)]),
    "data_cpus": frozenset(range(12, 24)),
}
cpu_sets = st.frozensets(st.integers(0, 63), min_size=1, max_size=10)


def _leaf() -> st.SearchStrategy[CpuExpr]:
    return st.one_of(
        st.sampled_from(sorted(ENV)).map(CpuName),
        cpu_sets.map(CpuLit),
    )


exprs: st.SearchStrategy[CpuExpr] = st.recursive(
    _leaf(),
    lambda inner: st.builds(CpuOp, st.sampled_from(["+", "-", "&"]), inner, inner),
    max_leaves=12,
)


def _render(e: CpuExpr) -> str:
    if isinstance(e, CpuName):
        return e.name
    if isinstance(e, CpuLit):
        from lbtune.host.kernel.cpulist import format_cpulist

        return format_cpulist(e.cpus)
    return f"({_render(e.left)} {e.op} {_render(e.right)})"


def _direct(e: CpuExpr) -> frozenset[int]:
    if isinstance(e, CpuName):
        return ENV[e.name]
    if isinstance(e, CpuLit):
        return e.cpus
    a, b = _direct(e.left), _direct(e.right)
    return {"+": a | b, "-": a - b, "&": a & b}[e.op]


@settings(max_examples=300, deadline=None)
@given(exprs)
def test_cpu_expressions_round_trip_and_evaluate(e: CpuExpr) -> None:
    parsed = parse_cpu_expr(_render(e))
    assert eval_cpu_expr(parsed, ENV.__getitem__) == _direct(e)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from([*sorted(ENV), "0-3", "8,10-11"]), min_size=1, max_size=6),
    st.lists(st.sampled_from(["+", "-", "&"]), min_size=5, max_size=5),
)
def test_precedence_and_left_associativity(names: list[str], ops: list[str]) -> None:
    """`&` binds tighter than `+`/`-`, which group left to right."""
    text = names[0]
    for op, n in zip(ops, names[1:]):
        text += f" {op} {n}"

    def value(n: str) -> frozenset[int]:
        return ENV[n] if n in ENV else parse_cpulist(n)

    # reference: fold '&' runs first, then apply + and - left to right
    terms: list[frozenset[int]] = [value(names[0])]
    signs: list[str] = []
    for op, n in zip(ops, names[1:]):
        if op == "&":
            terms[-1] = terms[-1] & value(n)
        else:
            signs.append(op)
            terms.append(value(n))
    want = terms[0]
    for op, t in zip(signs, terms[1:]):
        want = want | t if op == "+" else want - t
    assert eval_cpu_expr(parse_cpu_expr(text), ENV.__getitem__) == want


@settings(max_examples=500, deadline=None)
@given(
    st.one_of(
        st.text(max_size=60),
        st.lists(
            st.sampled_from(
                [
                    "(",
                    ")",
                    "+",
                    "-",
                    "&",
                    " ",
                    "nic-local",
                    "0-3",
                    "1,",
                    ":2/4",
                    "node0",
                    "x",
                    "-",
                    "99999",
                    "0-11:2/4",
                ]
            ),
            max_size=20,
        ).map("".join),
    )
)
def test_cpu_expression_parser_only_raises_bad_input(text: str) -> None:
    try:
        expr = parse_cpu_expr(text)
    except BadInput as e:
        assert "\n" not in str(e)
        return
    with contextlib.suppress(KeyError):  # names unknown to this test's environment
        eval_cpu_expr(expr, ENV.__getitem__)


def test_cpu_expression_examples() -> None:
    def ev(t: str) -> frozenset[int]:
        return eval_cpu_expr(parse_cpu_expr(t), ENV.__getitem__)

    assert ev("nic-local - data_cpus") == frozenset(range(36, 48))
    assert ev("0-3 + 8 & 8-9") == frozenset({0, 1, 2, 3, 8})
    assert ev("(0-3 + 8) & 3-9") == frozenset({3, 8})
    assert ev("0-11:2/4") == frozenset({0, 1, 4, 5, 8, 9})
    for bad in (
        "",
        "0-3 +",
        "(0-3",
        "0-3)",
        "a b",
        "0-3-1",
        "__import__('os')",
        "0 - - 1",
        "x" * 600,
    ):
        with pytest.raises(BadInput):
            parse_cpu_expr(bad)
    with pytest.raises(BadInput, match="nested too deeply"):
        parse_cpu_expr("(" * 40 + "0" + ")" * 40)
