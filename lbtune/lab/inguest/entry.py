"""Guest-side entry point of the lab: runs one Python function inside a lab guest.

``python -m lbtune.lab.inguest.entry TARGET JSON_ARGS RESULT_FILE`` imports TARGET
(``"package.module:function"``), calls it with the positional arguments decoded from
JSON_ARGS (a JSON list) and writes ``{"ok": true, "value": ...}`` or
``{"ok": false, "error": ..., "exc_type": ..., "traceback": ...}`` as JSON to RESULT_FILE
(in the call's directory of the work directory both sides see). The guest agent
(lbtune.lab.inguest.agent) runs it for a call request, on either backend; `in_lab` tells
guest-only code that it runs in a lab guest. Also usable on the host for debugging a guest
function.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from typing import Any, Callable, Optional, Sequence

from lbtune.lab.protocol import ENV_WORKDIR, IN_LAB_ENV, IN_VM_ENV, VM_CMDLINE_MARK, write_json

PROC_CMDLINE = "/proc/cmdline"


def in_lab() -> bool:
    """True inside a lab guest: the UML one (lbtune.lab.guests.uml: env marker and a UML kernel) or
    the VM one (lbtune.lab.guests.vm: env marker and a kernel booted with the VM's command line
    mark). Guest-only actions (module loads, global sysctls) check it; the env marker alone,
    which anyone can set on the host, is never enough."""
    if os.environ.get(IN_LAB_ENV) == "1" and running_on_uml():
        return True
    return os.environ.get(IN_VM_ENV) == "1" and running_on_lab_vm()


def running_on_lab_vm() -> bool:
    """True when the running kernel was booted by the VM lab (its command line has the mark)
    and is not UML."""
    try:
        with open(PROC_CMDLINE, encoding="utf-8", errors="replace") as fh:
            words = fh.read(65536).split()
    except OSError:
        return False
    return VM_CMDLINE_MARK in words and not running_on_uml()


def running_on_uml() -> bool:
    """True when the running kernel is User-Mode Linux (its /proc/cpuinfo says so)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    for line in head.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "vendor_id":
            return value.strip() == "User Mode Linux"
    return False


def split_target(target: str) -> tuple[str, str]:
    """``"pkg.mod:func"`` -> ``("pkg.mod", "func")``; ValueError when malformed."""
    module, sep, attr = target.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"lab target must look like 'package.module:function', got {target!r}")
    for part in module.split(".") + attr.split("."):
        if not part.isidentifier():
            raise ValueError(f"lab target {target!r}: {part!r} is not a Python identifier")
    return module, attr


def resolve(target: str) -> Callable[..., Any]:
    module_name, attr = split_target(target)
    obj: Any = importlib.import_module(module_name)
    for name in attr.split("."):
        obj = getattr(obj, name)
    if not callable(obj):
        raise TypeError(f"lab target {target!r} is not callable")
    return obj  # type: ignore[no-any-return]


def call(target: str, args: Sequence[Any]) -> dict[str, Any]:
    """Call target(*args) and return the result payload (never raises for target errors)."""
    try:
        value = resolve(target)(*args)
        json.dumps(value)  # fail here, with a traceback, when the value is not JSON
        return {"ok": True, "value": value}
    except Exception as exc:
        return {
            "ok": False,
            "exc_type": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "error": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(),
        }


def write_result(path: str, payload: dict[str, Any]) -> None:
    """Write payload as JSON, durably: the guest may power off right after."""
    write_json(path, payload)


def forked_call(target: str, json_args: str, result_file: str, workdir: str, out: str,
                err: str) -> None:
    """`main` in a child forked by the VM agent's fork server (lbtune.lab.inguest.agent): as
    ``python -m lbtune.lab.inguest.entry`` would run, with stdin from /dev/null, stdout and stderr
    into the files `out` and `err`, and `$LBTUNE_LAB_WORKDIR` set to `workdir`. Exits with
    main's code."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, out), (2, err)):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(f, fd)
        os.close(f)
    os.close(null)
    os.environ[ENV_WORKDIR] = workdir
    code = 1
    try:
        code = main([target, json_args, result_file])
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) != 3:
        sys.stderr.write("usage: python -m lbtune.lab.inguest.entry TARGET JSON_ARGS RESULT_FILE\n")
        return 2
    target, json_args, result_file = args
    try:
        call_args = json.loads(json_args)
        if not isinstance(call_args, list):
            raise TypeError("JSON_ARGS must be a JSON list")
    except (ValueError, TypeError) as exc:
        payload: dict[str, Any] = {
            "ok": False,
            "exc_type": f"{type(exc).__module__}.{type(exc).__qualname__}",
            "error": f"bad arguments: {exc}",
            "traceback": traceback.format_exc(),
        }
    else:
        payload = call(target, call_args)
    write_result(result_file, payload)
    if not payload["ok"]:
        sys.stderr.write(str(payload["traceback"]))
    return 0 if payload["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
