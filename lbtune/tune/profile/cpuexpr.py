"""CPU-set expressions in profiles: a tiny grammar of names, CPU lists and `+ - &`.

Nothing evaluates profile text as code; `parse_cpu_expr` builds a small tree that
`eval_cpu_expr` walks with a lookup for the names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Optional, Union

from lbtune.errors import BadInput
from lbtune.host.kernel.cpulist import CpuListError, parse_cpulist
from lbtune.tune.profile.model import show_value

MAX_EXPR = 512


@dataclass(frozen=True)
class CpuName:
    name: str


@dataclass(frozen=True)
class CpuLit:
    cpus: frozenset[int]


@dataclass(frozen=True)
class CpuOp:
    op: str  # "+" union, "-" difference, "&" intersection
    left: CpuExpr
    right: CpuExpr


CpuExpr = Union[CpuName, CpuLit, CpuOp]

BUILTIN_CPU_NAMES = ("online", "all", "isolated", "housekeeping", "nic-local")
NODE_NAME = re.compile(r"^node(\d{1,4})$")
_TOKEN = re.compile(
    r"\s*(?:(?P<op>[-+&()])|(?P<list>[0-9][0-9,:/-]*)|(?P<name>[A-Za-z_][A-Za-z0-9_-]*))"
)
_MAX_DEPTH = 32


def parse_cpu_expr(text: object) -> CpuExpr:
    """Parse a CPU-set expression; BadInput (one line) for anything else.

    Grammar: `expr := term (('+'|'-') term)*`, `term := atom ('&' atom)*`,
    `atom := NAME | CPULIST | '(' expr ')'`. Names: `online` (= `all`), `isolated`,
    `housekeeping`, `nic-local`, `nodeN` and the profile's own `[cpu]` names. Put spaces around
    `-` where it could be read as part of a name or a range (`nic-local - housekeeping`).
    """
    if not isinstance(text, str):
        raise BadInput(f"CPU expression must be a string, got {show_value(text)}")
    if len(text) > MAX_EXPR:
        raise BadInput("CPU expression too long")
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        if not text[pos:].strip():
            break
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            rest = show_value(text[pos:].strip()[:10])
            raise BadInput(f"CPU expression {show_value(text)}: unexpected {rest}")
        kind = m.lastgroup or ""
        tokens.append((kind, m.group(kind)))
        pos = m.end()
    if not tokens:
        raise BadInput("CPU expression is empty")
    parser = _ExprParser(text, tokens)
    expr = parser.expr(0)
    if parser.i != len(tokens):
        raise BadInput(
            f"CPU expression {show_value(text)}: unexpected {show_value(tokens[parser.i][1])}"
        )
    return expr


class _ExprParser:
    def __init__(self, text: str, tokens: list[tuple[str, str]]) -> None:
        self.text = text
        self.tokens = tokens
        self.i = 0

    def _fail(self, what: str) -> BadInput:
        return BadInput(f"CPU expression {show_value(self.text)}: {what}")

    def _peek(self) -> Optional[tuple[str, str]]:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def expr(self, depth: int) -> CpuExpr:
        if depth > _MAX_DEPTH:
            raise self._fail("nested too deeply")
        left = self.term(depth)
        while (tok := self._peek()) is not None and tok[1] in ("+", "-"):
            self.i += 1
            left = CpuOp(tok[1], left, self.term(depth))
        return left

    def term(self, depth: int) -> CpuExpr:
        left = self.atom(depth)
        while (tok := self._peek()) is not None and tok[1] == "&":
            self.i += 1
            left = CpuOp("&", left, self.atom(depth))
        return left

    def atom(self, depth: int) -> CpuExpr:
        tok = self._peek()
        if tok is None:
            raise self._fail("ends where a CPU set was expected")
        kind, value = tok
        self.i += 1
        if kind == "name":
            return CpuName(value)
        if kind == "list":
            try:
                return CpuLit(parse_cpulist(value))
            except CpuListError as e:
                raise self._fail(str(e)) from None
        if value == "(":
            inner = self.expr(depth + 1)
            close = self._peek()
            if close is None or close[1] != ")":
                raise self._fail("missing ')'")
            self.i += 1
            return inner
        raise self._fail(f"unexpected {value!r}")


def cpu_expr_names(expr: CpuExpr) -> set[str]:
    """Every name an expression refers to."""
    out: set[str] = set()
    stack = [expr]
    while stack:
        e = stack.pop()
        if isinstance(e, CpuName):
            out.add(e.name)
        elif isinstance(e, CpuOp):
            stack += [e.left, e.right]
    return out


def eval_cpu_expr(expr: CpuExpr, lookup: Callable[[str], frozenset[int]]) -> frozenset[int]:
    """Evaluate an expression; `lookup` gives each name's set (and raises BadInput if unknown)."""
    if isinstance(expr, CpuName):
        return lookup(expr.name)
    if isinstance(expr, CpuLit):
        return expr.cpus
    left, right = eval_cpu_expr(expr.left, lookup), eval_cpu_expr(expr.right, lookup)
    if expr.op == "+":
        return left | right
    if expr.op == "-":
        return left - right
    return left & right


def is_builtin_cpu_name(name: str) -> bool:
    return name in BUILTIN_CPU_NAMES or bool(NODE_NAME.match(name))
