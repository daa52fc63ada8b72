"""The LBTUNE_* environment variables lbtune reads, and what each may hold.

Checked before anything runs (lbtune.cli.main), so garbage is one line and exit 2, never a
traceback or a half-run command. Standard library only, nothing imported: the answers
given before the command line loads (lbtune.cli.ipvs.fast: `ipvs serve`'s, the no-op
record's) check the same first."""

from __future__ import annotations

TYPE_CHECKING = False  # typing costs an import here; mypy reads this name as typing's
if TYPE_CHECKING:
    from collections.abc import Mapping  # (collections too: the fast path imports neither)

FLAGS = ("", "0", "1", "true", "false", "yes", "no", "on", "off", "t", "f", "y", "n")
PATHS = ("LBTUNE_STATE_DIR", "LBTUNE_LAB_RUN_DIR", "LBTUNE_LAB_KERNEL", "LBTUNE_LAB_MODULES")
CHOICES = {
    "LBTUNE_DEBUG": FLAGS,
    "LBTUNE_NO_BCC": ("", "0", "1"),
    "LBTUNE_LAB_KEEP": ("", "0", "1"),
    "LBTUNE_LAB_FPU": ("", "auto", "native", "shim", "legacy"),
}


def problem(environ: Mapping[str, str]) -> str | None:
    """Why an LBTUNE_* variable cannot be used (one line), or None."""
    for name, choices in CHOICES.items():
        value = environ.get(name)
        if value is not None and value.strip().lower() not in choices:
            return f"{name}={value[:40]!r}: expected one of {', '.join(c for c in choices if c)}"
    for name in PATHS:
        value = environ.get(name)
        if value and (not value.startswith("/") or any(c < " " or c == "\x7f" for c in value)):
            return f"{name}={value[:40]!r}: expected an absolute path"
    return None
