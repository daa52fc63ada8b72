"""What every `lbtune ipvs` command shares: the config argument, the live host, the state
directory, and JSON output sized for 10,000-row plans."""

from __future__ import annotations

import contextlib
import gc
import os
from typing import Any, Iterator

import click

from lbtune.cli.main import runtime_of
from lbtune.cli.output import emit_json as _emit_json
from lbtune.errors import BadInput, NeedsPrivilege


def emit_json(doc: Any) -> None:
    """JSON on stdout; a document with more than _BIG plan rows goes out on one line: the
    indenting encoder is pure Python and costs seconds per 10,000 rows (pipe through jq)."""
    changes = doc.get("changes") if isinstance(doc, dict) else None
    if isinstance(changes, list) and len(changes) > _BIG:
        import json
        import sys

        from lbtune.cli.output import jsonable

        sys.stdout.write(json.dumps(doc, default=jsonable) + "\n")
    else:
        _emit_json(doc)


_BIG = 1000



@contextlib.contextmanager
def bulk() -> Iterator[None]:
    """Python's cycle collector paused while a command builds tens of thousands of acyclic
    objects (config, kernel table, plan: reference counting frees them all the same), so
    its repeated passes over the growing heap find nothing. Back on afterwards."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def director_config(path: str) -> Any:
    from lbtune.ipvs.config import load_config

    return load_config(path)


def ipvs_host(ctx: click.Context, changes: bool = False) -> Any:
    host = runtime_of(ctx).host()
    if not host.is_live:
        raise BadInput("lbtune ipvs works on the running kernel, not on a --root tree")
    if changes and os.geteuid() != 0:
        raise NeedsPrivilege("changing IPVS and addresses needs root")
    return host


def ipvs_state(ctx: click.Context, host: Any) -> Any:
    from lbtune.tune.service import state_dir

    return state_dir(runtime_of(ctx), host)
