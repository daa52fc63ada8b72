# -*- coding: utf-8 -*-
# Copyright: lbtune developers
# Apache License 2.0 (see the lbtune repository's LICENSE)

from __future__ import absolute_import, division, print_function

__metaclass__ = type


class ModuleDocFragment(object):
    """The options every lbtune.fleet module shares (module_utils/lbtune_cli.COMMON_ARGS)."""

    DOCUMENTATION = r"""
options:
  netns:
    description:
      - Run inside this network namespace (C(lbtune --netns)).
    type: str
  root:
    description:
      - A host tree or capture to act on instead of C(/) (C(lbtune --root)).
    type: path
  executable:
    description:
      - Path of the C(lbtune) command. By default it is looked up beside the Python
        that runs the module (so a venv's Python as C(ansible_python_interpreter) finds
        that venv's lbtune), in C(/usr/local/bin), C(/opt/lbtune/.venv/bin),
        C(/opt/lbtune/bin) and C(PATH), then as that Python's own C(lbtune) package.
      - A checkout set up with C(make setup) has it at C(CHECKOUT/.venv/bin/lbtune),
        on no C(PATH).
    type: path
"""
