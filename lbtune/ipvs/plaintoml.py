"""A fast reader for the plain subset of TOML that large IPVS configs are written in.

`tomllib` is pure Python: a 1,000-service x 10-server config (34,000 lines) was the largest
part of a no-op reconcile (bench/ipvs_profile.py, docs/ipvs.md "Performance"). Generated
configs (and most hand-written ones) use a small, line-oriented part of TOML: `[table]` and
`[[array]]` / `[[array.sub]]` headers, `key = value` with bare keys, values that are basic
strings without escapes, decimal integers, booleans or one-line arrays of such strings, and
comments. `loads` reads exactly that and returns None for anything else (a quoted or dotted
key, an escape, a float, a redefinition, a stray character...): the caller then hands the
document to tomllib, which reads the rest of TOML and words the errors. So whenever this
returns a document, it is the one tomllib returns for the same text."""

from __future__ import annotations

import re
from typing import Any, Optional

_BARE = r"[A-Za-z0-9_-]+"
_STR = r'"[^"\\\x00-\x1f\x7f]*"'
_TAIL = r"[ \t]*(?:#[^\n]*)?"
_KV = re.compile(
    rf"[ \t]*({_BARE})[ \t]*=[ \t]*"
    rf"(?:({_STR})|(-?(?:0|[1-9][0-9]*))|(true|false)"
    rf"|(\[[ \t]*(?:{_STR}[ \t]*(?:,[ \t]*{_STR}[ \t]*)*,?[ \t]*)?\])){_TAIL}"
)
_AOT = re.compile(rf"[ \t]*\[\[[ \t]*({_BARE})(?:\.({_BARE}))?[ \t]*\]\]{_TAIL}")
_TABLE = re.compile(rf"[ \t]*\[[ \t]*({_BARE})[ \t]*\]{_TAIL}")
_SKIP = re.compile(rf"{_TAIL}")
_STRINGS = re.compile(_STR)
# TOML allows no control character but tab outside newlines (comments included); "\r" is
# left to tomllib too (CRLF line ends).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


def loads(text: str) -> Optional[dict[str, Any]]:
    """The document, or None when `text` is not in the plain subset (read it with tomllib)."""
    if _CONTROL.search(text):
        return None
    root: dict[str, Any] = {}
    arrays: set[int] = set()  # ids of the lists [[...]] headers made (those may grow)
    current = root
    kv, aot, table, skip = _KV.fullmatch, _AOT.fullmatch, _TABLE.fullmatch, _SKIP.fullmatch
    for line in text.split("\n"):
        m = kv(line)
        if m is not None:
            key = m.group(1)
            if key in current:
                return None
            s, i, b, a = m.group(2, 3, 4, 5)
            if s is not None:
                current[key] = s[1:-1]
            elif i is not None:
                current[key] = int(i)
            elif b is not None:
                current[key] = b == "true"
            else:
                current[key] = [x[1:-1] for x in _STRINGS.findall(a)]
            continue
        m = aot(line)
        if m is not None:
            name, sub = m.group(1, 2)
            owner = root
            if sub is not None:
                parent = root.get(name)
                if not isinstance(parent, list) or id(parent) not in arrays or not parent:
                    return None
                owner, name = parent[-1], sub
            items = owner.get(name)
            if items is None:
                items = owner[name] = []
                arrays.add(id(items))
            elif not isinstance(items, list) or id(items) not in arrays:
                return None
            current = {}
            items.append(current)
            continue
        m = table(line)
        if m is not None:
            name = m.group(1)
            if name in root:
                return None
            current = root[name] = {}
            continue
        if skip(line) is None:
            return None
    return root
