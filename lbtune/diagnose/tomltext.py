"""TOML text for the few value shapes a profile written by lbtune holds.

Keys, strings, integers, booleans, lists of strings and inline tables: enough for the
profile lines a finding proposes and the profile `diagnose --write-profile` writes. Every
string goes out as a TOML basic string with escapes, so no data (an interface name, a
reason quoting an IPv6 address) can end a string or start another key.
"""

from __future__ import annotations

import re
from typing import Sequence, Union

Scalar = Union[int, str, bool]
_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


_ESCAPES = {ord('"'): '\\"', ord("\\"): "\\\\"}
_ESCAPES.update({c: f"\\u{c:04X}" for c in (*range(0x20), 0x7F)})
_NEEDS_ESCAPE = re.compile(r'["\\\x00-\x1f\x7f]')


def string(text: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped."""
    # (the monitor writes every finding's fix lines each second: most need no escape)
    if _NEEDS_ESCAPE.search(text) is None:
        return f'"{text}"'
    return '"' + text.translate(_ESCAPES) + '"'


def key(name: str, quote: bool = False) -> str:
    """A key: bare when it can be, quoted otherwise (always quoted with `quote`)."""
    return name if _BARE.match(name) and not quote else string(name)


def value(v: Union[Scalar, Sequence[str]]) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, str):
        return string(v)
    return "[" + ", ".join(string(x) for x in v) + "]"


def inline_table(pairs: Sequence[tuple[str, Scalar]]) -> str:
    """`{ a = 1, b = "x" }`."""
    return "{ " + ", ".join(f"{key(k)} = {value(v)}" for k, v in pairs) + " }"
