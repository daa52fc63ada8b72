#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: lbtune developers
# Apache License 2.0 (see the lbtune repository's LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: lbtune_profile
short_description: Apply or roll back an lbtune tuning profile
description:
  - Applies an lbtune profile (sysctls, NIC rings and channels, IRQ affinity, RPS/XPS,
    irqbalance, kernel command line) with C(lbtune apply), or rolls it back with
    C(lbtune rollback).
  - The module runs the installed C(lbtune) with C(--json); lbtune plans, journals the
    original values, applies, reads back, and restores everything on any failure.
  - Check mode runs C(lbtune plan) and changes nothing. Diff mode shows each knob before
    and after.
  - Idempotent - a profile already in effect reports C(changed=false).
version_added: "0.1.0"
author:
  - lbtune developers (!UNKNOWN)
options:
  profile:
    description:
      - A shipped profile name (C(web), C(lb-dr), ...), a profile under
        C(/etc/lbtune/profiles), or the path of a profile TOML file on the managed host.
    type: str
    required: true
  state:
    description:
      - C(present) applies the profile; C(absent) rolls back the applies of this profile
        that are the newest on the host (an apply of another profile made after them must
        be rolled back first, and the task fails saying so).
    type: str
    choices: [present, absent]
    default: present
  iface:
    description:
      - The data interface the profile's C([nic.data]) sections tune.
    type: str
  persist:
    description:
      - Also write the boot-time files (sysctl.d, the boot unit, the bootloader command
        line) when the apply changes something. Not with I(netns).
    type: bool
    default: false
  allow_link_reset:
    description:
      - Ring and channel changes on the management interface reset the link; lbtune
        refuses them unless this is true (C(lbtune apply --yes)).
    type: bool
    default: false
extends_documentation_fragment:
  - lbtune.fleet.lbtune
notes:
  - Needs lbtune on the managed host and root for live changes.
  - Supports C(check_mode) and C(diff_mode).
seealso:
  - module: lbtune.fleet.lbtune_facts
  - module: lbtune.fleet.lbtune_ipvs
"""

EXAMPLES = r"""
- name: Tune the web tier
  lbtune.fleet.lbtune_profile:
    profile: web
    persist: true

- name: Tune an LVS DR director's data NIC (its rings reset the link)
  lbtune.fleet.lbtune_profile:
    profile: lb-dr
    iface: eth1
    allow_link_reset: true

- name: Undo it
  lbtune.fleet.lbtune_profile:
    profile: lb-dr
    state: absent
"""

RETURN = r"""
changes:
  description: The knobs that changed (or would change, in check mode). Values are plain
    strings with single spaces (the kernel prints some with tabs).
  returned: always
  type: list
  elements: dict
  sample: [{"kind": "sysctl", "object": "net.core.somaxconn", "current": "4096",
            "desired": "8192"}]
not_applied:
  description: Knobs lbtune did not change, with the reason (not on this host, or
    host-global in a namespace).
  returned: always
  type: list
  elements: dict
journal:
  description: The journal id of the apply (C(state=present)), for C(lbtune rollback --to).
  returned: when something was applied
  type: str
  sample: 20261125T161220-001
rolled_back:
  description: The journal ids rolled back (C(state=absent)).
  returned: when state is absent
  type: list
  elements: str
needs_reboot:
  description: Kernel command line changes take effect after a reboot.
  returned: when state is present
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.lbtune.fleet.plugins.module_utils.lbtune_cli import (
    COMMON_ARGS,
    Lbtune,
    LbtuneError,
    diff_of,
    plain,
)

SKIP_REASON = {
    "missing": "not on this host",
    "skipped": "host-global: not changed from a namespace",
}


def _short(row):
    out = dict((k, row.get(k)) for k in ("kind", "object", "reason"))
    out.update(current=plain(row.get("current")), desired=plain(row.get("desired")))
    return out


def present(module, lb):
    p = module.params
    where = ["--iface", p["iface"]] if p.get("iface") else []
    _rc, plan = lb.run(["plan", p["profile"]] + where)
    rows = plan.get("changes", [])
    pending = [r for r in rows if r.get("action") == "change"]
    not_applied = [dict(_short(r), why=SKIP_REASON.get(r.get("action"), ""))
                   for r in rows if r.get("action") in SKIP_REASON]
    result = dict(changed=bool(pending), changes=[_short(r) for r in pending],
                  not_applied=not_applied, needs_reboot=bool(plan.get("needs_reboot")))
    if module._diff:
        result["diff"] = diff_of(pending, "current", "desired", "lbtune %s" % p["profile"])
    if not pending or module.check_mode:
        return result
    args = ["apply", p["profile"]] + where
    if p["persist"]:
        args.append("--persist")
    if p["allow_link_reset"]:
        args.append("--yes")
    _rc, done = lb.run(args)
    applied = [r for r in done.get("changes", []) if r.get("action") == "change"]
    result.update(changed=bool(done.get("journal")), changes=[_short(r) for r in applied],
                  journal=done.get("journal"), needs_reboot=bool(done.get("needs_reboot")),
                  persisted=bool(done.get("persisted")))
    if module._diff:
        result["diff"] = diff_of(applied, "current", "desired", "lbtune %s" % p["profile"])
    return result


def absent(module, lb):
    """Roll back this profile's applies from the top of the journal stack."""
    name = module.params["profile"]
    _rc, hist = lb.run(["history"])
    live = [j for j in hist.get("journals", []) if j.get("state") == "applied"]
    mine = [j for j in live if _same_profile(j.get("profile"), name)]
    result = dict(changed=False, rolled_back=[], changes=[], not_applied=[])
    if not mine:
        return result
    top = []
    for j in reversed(live):
        if not _same_profile(j.get("profile"), name):
            break
        top.append(j)
    if len(top) != len(mine):
        first = live.index(mine[0])  # history lists the oldest first
        later = [j["id"] for j in live[first:] if not _same_profile(j.get("profile"), name)]
        module.fail_json(msg="cannot roll back %s: applies of other profiles came after it (%s);"
                         " roll those back first" % (name, ", ".join(later)))
    knobs = [dict(kind=k.get("kind"), object=k.get("object"), current=plain(k.get("desired")),
                  desired=plain(k.get("original"))) for j in top for k in j.get("knobs", [])]
    result.update(changed=True, rolled_back=[j["id"] for j in top], changes=knobs)
    if module._diff:
        result["diff"] = diff_of(knobs, "current", "desired", "lbtune rollback %s" % name)
    if module.check_mode:
        return result
    _rc, done = lb.run(["rollback", "--to", top[-1]["id"]])
    result["rolled_back"] = done.get("rolled_back", [])
    return result


def _same_profile(recorded, wanted):
    """A journal records the profile's name; the task may name a file path."""
    if recorded is None:
        return False
    base = wanted.rsplit("/", 1)[-1]
    if base.endswith(".toml"):
        base = base[: -len(".toml")]
    return recorded in (wanted, base)


def main():
    spec = dict(
        profile=dict(type="str", required=True),
        state=dict(type="str", choices=["present", "absent"], default="present"),
        iface=dict(type="str"),
        persist=dict(type="bool", default=False),
        allow_link_reset=dict(type="bool", default=False),
    )
    spec.update(COMMON_ARGS)
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    try:
        lb = Lbtune(module)
        if module.params["state"] == "present":
            result = present(module, lb)
        else:
            result = absent(module, lb)
    except LbtuneError as exc:
        module.fail_json(msg=exc.message, rc=exc.rc)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
