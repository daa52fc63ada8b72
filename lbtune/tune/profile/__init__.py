"""Tuning profiles: TOML files saying what a host role wants, resolved against its topology.

A profile is parsed and validated completely before anything reads the host (`load_profile`,
profile/load.py; the rules are in profile/schema.py), merged with the profiles it includes
(included first, later values override), and turned into knob targets for one host by
`resolve` (profile/resolve.py), where the values computed from topology get their numbers.
CPU-set expressions have their own small grammar (profile/cpuexpr.py). The format is
documented in docs/tuning.md; every value carries a one-line reason. Nothing here writes to
the host, and nothing evaluates profile text as code.
"""

from __future__ import annotations

from lbtune.tune.profile.cpuexpr import (
    BUILTIN_CPU_NAMES,
    CpuExpr,
    CpuLit,
    CpuName,
    CpuOp,
    cpu_expr_names,
    eval_cpu_expr,
    parse_cpu_expr,
)
from lbtune.tune.profile.load import (
    list_profiles,
    load_profile,
    profile_dirs,
    shipped_profiles_dir,
)
from lbtune.tune.profile.model import (
    CMDLINE_KEYS,
    LB_ROLES,
    NIC_KEYS,
    ROLES,
    SECTIONS,
    Profile,
    ProfileInfo,
    Setting,
)
from lbtune.tune.profile.resolve import cpu_values, resolve
from lbtune.tune.profile.schema import parse_profile_data, parse_profile_text

__all__ = [
    "BUILTIN_CPU_NAMES",
    "CMDLINE_KEYS",
    "LB_ROLES",
    "NIC_KEYS",
    "ROLES",
    "SECTIONS",
    "CpuExpr",
    "CpuLit",
    "CpuName",
    "CpuOp",
    "Profile",
    "ProfileInfo",
    "Setting",
    "cpu_expr_names",
    "cpu_values",
    "eval_cpu_expr",
    "list_profiles",
    "load_profile",
    "parse_cpu_expr",
    "parse_profile_data",
    "parse_profile_text",
    "profile_dirs",
    "resolve",
    "shipped_profiles_dir",
]
