"""The systemd units' exposure: `systemd-analyze security --offline=true` of each shipped unit.

Usage: python bench/units.py [--out FILE]

For every unit in packaging/systemd/ (the template as its instance `lbtune-adapt@web.service`)
this records systemd's own exposure score (0 = locked down, 10 = unprotected; systemd 252's
table of settings and weights) and rating, who the unit runs as and the capabilities it keeps,
read from the unit file, beside `systemd-analyze verify` (clean = no message). It needs
neither systemd as PID 1 nor root: both commands read the files offline. Results:
bench/results/units.json and .md; docs/install.md renders the table from them.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass

from results_io import run_meta, write_json, write_markdown

MEASURES = ("packaging/systemd",)  # the unit files scored (bench/check.py)

HERE = pathlib.Path(__file__).resolve().parent
UNITS = HERE.parent / "packaging" / "systemd"
INSTANCE = "web"  # lbtune-adapt@.service is scored as lbtune-adapt@web.service
EXEC = "/usr/bin/lbtune"  # what the units start (the package's launcher)


@dataclass(frozen=True)
class Unit:
    unit: str
    runs_as: str
    capabilities: str
    exposure: float
    rating: str
    verify: str


def settings(text: str) -> dict[str, str]:
    """The last value of each `Key=value` line of a unit file (what systemd keeps for these)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and not line.startswith(("#", ";", "[")):
            out[key.strip()] = value.strip()
    return out


def instance_name(path: pathlib.Path) -> str:
    return path.name.replace("@.", f"@{INSTANCE}.")


def staged(tmp: pathlib.Path, exe: str) -> list[pathlib.Path]:
    """The units copied under their instance names, ExecStart's binary replaced by `exe`
    (verify checks that it exists and is executable: the package's is not installed here)."""
    out = []
    for path in sorted(UNITS.glob("*.service")):
        dest = tmp / instance_name(path)
        dest.write_text(path.read_text().replace(f"ExecStart={EXEC} ", f"ExecStart={exe} "))
        out.append(dest)
    return out


def verify(unit: pathlib.Path) -> str:
    """`systemd-analyze verify`'s messages ("" when clean); it exits 0 on unknown keys."""
    r = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)],
                       capture_output=True, text=True, check=False)  # fmt: skip
    return (r.stdout + r.stderr).strip() or ("" if r.returncode == 0 else f"exit {r.returncode}")


def security(unit: pathlib.Path) -> tuple[float, str]:
    """The overall exposure and rating systemd-analyze gives the unit file."""
    r = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager",
                        str(unit)], capture_output=True, text=True, check=False)  # fmt: skip
    last = [ln for ln in r.stdout.splitlines() if "Overall exposure level" in ln]
    if r.returncode != 0 or not last:
        raise SystemExit(f"units: systemd-analyze security {unit.name}: {r.stderr.strip()}")
    words = last[0].split(":", 1)[1].split()
    return float(words[0]), words[1]


def measure(unit: pathlib.Path, original: pathlib.Path) -> Unit:
    s = settings(original.read_text())
    who = "dynamic user" if s.get("DynamicUser") == "yes" else s.get("User", "root")
    caps = s.get("CapabilityBoundingSet", "(all)") or "none"
    exposure, rating = security(unit)
    return Unit(unit.name, who, caps, exposure, rating, verify(unit))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, default=HERE / "results" / "units.json")
    args = ap.parse_args()
    if shutil.which("systemd-analyze") is None:
        raise SystemExit("units: systemd-analyze not found (Debian's systemd package)")
    version = subprocess.run(["systemd-analyze", "--version"], capture_output=True, text=True,
                             check=False).stdout.split("\n", 1)[0]  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        originals = {instance_name(p): p for p in UNITS.glob("*.service")}
        results = [measure(u, originals[u.name]) for u in staged(pathlib.Path(tmp), "/bin/true")]
    meta = run_meta(1, systemd=version, units_dir="packaging/systemd")
    write_json(args.out, meta, results)
    write_markdown(
        args.out,
        [f"# Unit exposure ({meta['date']} at {meta['commit']}, {version}; "
         "`systemd-analyze security --offline=true`)"],
        [("unit", "l"), ("runs as", "l"), ("capabilities kept", "l"), ("exposure", "r"),
         ("rating", "l"), ("verify", "l")],
        [[f"`{r.unit}`", r.runs_as, r.capabilities, f"{r.exposure:.1f}", r.rating,
          "clean" if not r.verify else json.dumps(r.verify)] for r in results],
    )
    return 0 if all(not r.verify for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
