"""Typed access to one table of a TOML config, every error one line naming the file and the
entry (`BadInput("dr.toml: [cluster]: asn = 'x': expected ...")`). Shared by the IPVS config
(lbtune.ipvs.config) and its `[cluster]` section (lbtune.ipvs.cluster)."""

from __future__ import annotations

from typing import Any, Optional

from lbtune.errors import BadInput
from lbtune.host.ipvs.table import canonical_addr


class Doc:
    """Typed access to one TOML table, every error naming the file and the entry."""

    def __init__(self, data: Any, source: str, where: str, keys: tuple[str, ...]) -> None:
        if not isinstance(data, dict):
            raise BadInput(f"{source}: {where}: expected a table")
        unknown = sorted(str(k) for k in data if k not in keys)
        if unknown:
            raise BadInput(f"{source}: {where}: unknown key {unknown[0]!r} "
                           f"(expected: {', '.join(keys)})")  # fmt: skip
        self.data, self.source, self.where = data, source, where

    def fail(self, msg: str) -> BadInput:
        return BadInput(f"{self.source}: {self.where}: {msg}")

    def integer(self, key: str, default: Optional[int], lo: int, hi: int) -> int:
        v = self.data.get(key, default)
        if v is None:
            raise self.fail(f"{key} is required")
        if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
            raise self.fail(f"{key} = {v!r}: expected a whole number from {lo} to {hi}")
        return v

    def text(self, key: str, default: Optional[str], choices: tuple[str, ...] = ()) -> str:
        v = self.data.get(key, default)
        if v is None:
            raise self.fail(f"{key} is required")
        if not isinstance(v, str) or (choices and v not in choices):
            expect = f"one of {', '.join(choices)}" if choices else "a string"
            raise self.fail(f"{key} = {v!r}: expected {expect}")
        return v

    def addr(self, key: str) -> tuple[int, str]:
        """(4 or 6, the address in canonical form)."""
        v = self.text(key, None)
        try:
            return canonical_addr(v, key)
        except BadInput:
            raise self.fail(f"{key} = {v!r} is not an IP address") from None

    def tables(self, key: str) -> list[Any]:
        v = self.data.get(key, [])
        if isinstance(v, dict):
            v = [v]
        if not isinstance(v, list):
            raise self.fail(f"{key}: expected [[{key}]] tables")
        return v

    def number(self, key: str, default: Optional[float], lo: float, hi: float) -> float:
        """An integer or a float from `lo` to `hi` (seconds, say)."""
        v = self.data.get(key, default)
        if v is None:
            raise self.fail(f"{key} is required")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
            raise self.fail(f"{key} = {v!r}: expected a number from {lo:g} to {hi:g}")
        return float(v)

    def boolean(self, key: str, default: bool) -> bool:
        v = self.data.get(key, default)
        if not isinstance(v, bool):
            raise self.fail(f"{key} = {v!r}: expected true or false")
        return v
