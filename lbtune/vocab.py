"""The words lbtune uses for verdicts and in JSON, defined once for every command.

Verdicts. Every judgement lbtune prints (a diagnose finding, a checklist check, a profile
lint finding, a load-command lint finding) carries one `Level`:

    fail  packets or connections are lost now, the run will not measure what it claims,
          or the value is harmful: act on it
    warn  loss is likely under load, a degraded mode is active, or the result will skew
    info  worth knowing, not a loss
    pass  checked and in order
    skip  could not be checked here (the data is not on this host or tree)

The state of a tuned setting is a different axis and has its own words (`ok`, `drift`,
`missing`, `skipped`: `lbtune.tune.engine.KnobStatus`).

JSON. Every command's `--json` document uses the same keys for the same things:
`kind` (knob kind: "sysctl", "ring", ...), `object` (what it acts on: "net.core.somaxconn",
"ens1f0np0 rx"), `key` (the profile key), `current` (the value now, null when absent),
`desired` (the value wanted), `reason` (one line, why), `level` (a `Level` word),
`status` (a knob state word). Errors under `--json` are a document too, on stdout:
`{"error": {"code": 2, "type": "bad-input", "message": "..."}}`.
"""

from __future__ import annotations

import enum


class Level(str, enum.Enum):
    """How bad a verdict is; `rank` sorts the worst first."""

    FAIL = "fail"
    WARN = "warn"
    INFO = "info"
    PASS = "pass"  # noqa: S105 (a verdict, not a password)
    SKIP = "skip"

    @property
    def rank(self) -> int:
        return _RANK[self.value]


_RANK = {"fail": 0, "warn": 1, "info": 2, "pass": 3, "skip": 4}
