#!/usr/bin/env python3
"""Write events/skb/kfree_skb/format as Linux 6.1's tracefs shows it, from Debian's 6.1 headers.

    python3 tests/data/tracefs/linux-6.1/derive.py [/usr/src/linux-headers-6.1.0-56-common]

The numbers are the positions in `enum skb_drop_reason` of include/net/dropreason.h (members
without explicit values: SKB_NOT_DROPPED_YET = 0, then one each); the table is the header's
DEFINE_DROP_REASON(FN, FNe) list, which include/trace/events/skb.h expands into
`__print_symbolic` (TRACE_DEFINE_ENUM makes tracefs print the numbers). The field layout is
TP_STRUCT__entry of that skb.h: skbaddr, location, protocol, reason. Does not import lbtune.
"""

from __future__ import annotations

import pathlib
import re
import sys

HERE = pathlib.Path(__file__).resolve().parent
HEADERS = "/usr/src/linux-headers-6.1.0-56-common"

FIELDS = """\
name: kfree_skb
ID: 1433
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:void * skbaddr;\toffset:8;\tsize:8;\tsigned:0;
\tfield:void * location;\toffset:16;\tsize:8;\tsigned:0;
\tfield:unsigned short protocol;\toffset:24;\tsize:2;\tsigned:0;
\tfield:enum skb_drop_reason reason;\toffset:28;\tsize:4;\tsigned:0;

"""


def enum_values(text: str) -> dict[str, int]:
    body = text[text.index("enum skb_drop_reason {") :]
    body = body[: body.index("};")]
    body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
    values: dict[str, int] = {}
    nxt = 0
    for m in re.finditer(r"\b(SKB_[A-Z0-9_]+)\s*(?:=\s*(\d+))?\s*,", body):
        nxt = int(m.group(2)) if m.group(2) else nxt
        values[m.group(1)] = nxt
        nxt += 1
    return values


def main() -> None:
    src = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else HEADERS)
    text = (src / "include/net/dropreason.h").read_text()
    values = enum_values(text)
    macro = text[text.index("#define DEFINE_DROP_REASON") : text.index("enum skb_drop_reason {")]
    names = re.findall(r"\bFNe?\((\w+)\)", macro)
    table = ", ".join(f'{{ {values["SKB_DROP_REASON_" + n]}, "{n}" }}' for n in names)
    fmt = (
        'print fmt: "skbaddr=%p protocol=%u location=%p reason: %s", REC->skbaddr, '
        f"REC->protocol, REC->location, __print_symbolic(REC->reason, {table})\n"
    )
    out = HERE / "events/skb/kfree_skb/format"
    out.write_text(FIELDS + fmt)


if __name__ == "__main__":
    main()
