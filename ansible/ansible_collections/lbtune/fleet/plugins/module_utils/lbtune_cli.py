# -*- coding: utf-8 -*-
# Copyright: lbtune developers
# Apache License 2.0 (see the lbtune repository's LICENSE)
"""Run lbtune's ``--json`` command line for the collection's modules.

The modules never re-implement lbtune: they call the installed ``lbtune`` with ``--json`` (an
argument list, never a shell string), read its one JSON document, and turn lbtune's own
error (``{"error": {"code", "type", "message"}}``) into the task's failure message.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import sys

# Where lbtune is looked for besides PATH: a pip --user install, a venv under /opt; and first
# the bin directory of the Python running the module (ansible_python_interpreter): a venv's
# Python finds that venv's lbtune (a checkout's `make setup` makes CHECKOUT/.venv).
EXTRA_DIRS = ["/usr/local/bin", "/opt/lbtune/.venv/bin", "/opt/lbtune/bin"]

# Options every module shares (merged into each module's argument_spec).
COMMON_ARGS = dict(
    netns=dict(type="str"),
    root=dict(type="path"),
    executable=dict(type="path"),
)


class LbtuneError(Exception):
    """lbtune exited with an error: its code and its one-line message."""

    def __init__(self, rc, message, doc=None):
        super(LbtuneError, self).__init__(message)
        self.rc = rc
        self.message = message
        self.doc = doc


class Lbtune(object):
    """The lbtune command line of one host (root tree and network namespace)."""

    def __init__(self, module):
        self.module = module
        params = module.params
        exe = params.get("executable")
        self.argv0 = [exe] if exe else find_lbtune(module)
        self.globals = []
        if params.get("root"):
            self.globals += ["--root", params["root"]]
        if params.get("netns"):
            self.globals += ["--netns", params["netns"]]

    def run(self, args, ok_codes=(0,)):
        """Run ``lbtune [--root R] [--netns NS] --json ARGS``; return (rc, parsed JSON).

        Raises LbtuneError unless rc is in ok_codes; the message is lbtune's own.
        """
        argv = self.argv0 + self.globals + ["--json"] + list(args)
        rc, out, err = self.module.run_command(argv, environ_update={"NO_COLOR": "1"})
        doc = None
        if out.strip():
            try:
                doc = json.loads(out)
            except ValueError:
                doc = None
        if rc not in ok_codes:
            message = None
            if isinstance(doc, dict) and isinstance(doc.get("error"), dict):
                message = doc["error"].get("message")
            if not message:
                lines = [line for line in err.strip().splitlines() if line.strip()]
                message = lines[-1] if lines else "lbtune exited with code %d" % rc
            raise LbtuneError(rc, message, doc)
        if not isinstance(doc, dict):
            raise LbtuneError(rc, "lbtune printed no JSON document (%s)" % " ".join(args))
        return rc, doc


def find_lbtune(module):
    """The command line of lbtune on this host: beside the module's Python, on PATH or in
    EXTRA_DIRS, else that Python's own lbtune package (``python -m lbtune``); the task fails
    with one line saying what to set when there is none."""
    here = os.path.dirname(sys.executable) if sys.executable else ""
    dirs = ([here] if here else []) + EXTRA_DIRS
    path = module.get_bin_path("lbtune", required=False, opt_dirs=dirs)
    if path:
        return [path]
    try:
        from importlib.util import find_spec

        if find_spec("lbtune") is not None and find_spec("click") is not None:
            return [sys.executable, "-m", "lbtune"]
    except (ImportError, ValueError):
        pass
    module.fail_json(msg="lbtune not found on PATH, in %s or beside the module's Python (%s):"
                     " set the task's executable: to it (a checkout set up with `make setup`"
                     " has CHECKOUT/.venv/bin/lbtune), or set ansible_python_interpreter to"
                     " that venv's Python" % (", ".join(EXTRA_DIRS), sys.executable))


def plain(value):
    """A value as one plain line: the kernel prints some with tabs (tcp_rmem)."""
    return None if value is None else " ".join(str(value).split())


def knob_line(row, value_key):
    """One knob as a diff line: ``kind object = value``."""
    value = plain(row.get(value_key))
    shown = "(absent)" if value is None else value
    return "%s %s = %s\n" % (row.get("kind"), row.get("object"), shown)


def diff_of(rows, before_key, after_key, header):
    """Ansible's diff: each changed knob before and after, one line each."""
    before = "".join(knob_line(r, before_key) for r in rows)
    after = "".join(knob_line(r, after_key) for r in rows)
    return {
        "before": before,
        "after": after,
        "before_header": "%s (before)" % header,
        "after_header": "%s (after)" % header,
    }
