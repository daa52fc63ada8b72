"""Which results in bench/results no longer describe the code: `make bench-check`.

Usage: python bench/check.py [--json] [--root DIR]

Every result JSON's `meta` names the script that wrote it (`script`) and the commit the
measured code was at (`commit`, from bench/results_io.py). Every bench script declares, in a
module-level `MEASURES` tuple, the paths (files or directories, from the repository's top)
whose code it measures; an entry `@NAME` stands for the paths of GROUPS[NAME] (`@cli`: the
command line every lbtune run starts, declared once here). A result is listed as:

- `stale`: the script itself or its MEASURES changed between the result's commit and HEAD
  (`git diff --quiet COMMIT HEAD -- SCRIPT PATHS` fails), or the result measured
  uncommitted code (`+dirty`);
- `no-commit`: its meta has no commit (or none git knows);
- `no-script`: its meta names no script, or a script that does not exist or declares no
  MEASURES;
- `no-meta`: a Markdown result without a JSON beside it, or a JSON without `meta`;
- `history`: kept on purpose for comparison (`meta.kept_for_history` says why) with its
  commit; listed, never a failure;
- `fresh`: none of the above.

Exit status: 0 when every result is fresh (or history), 1 when any is listed otherwise, 2 on a
usage error. Re-measure the listed results (`make bench`, or the one script) before a release.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Optional

TOP = Path(__file__).resolve().parent.parent
FAILING = ("stale", "no-commit", "no-script", "no-meta")
# Named sets of paths a script's MEASURES may name as "@NAME" (one place for a shared list).
GROUPS: dict[str, tuple[str, ...]] = {
    "@cli": ("lbtune/__init__.py", "lbtune/__main__.py", "lbtune/cli", "lbtune/environ.py",
             "lbtune/errors.py", "lbtune/host", "lbtune/vocab.py"),
}


@dataclass
class Status:
    result: str  # path from the top, e.g. bench/results/monitor.json
    status: str  # fresh, history, stale, no-commit, no-script, no-meta
    script: str = ""
    commit: str = ""
    reason: str = ""
    changed: list[str] = field(default_factory=list)


def measures(script: Path) -> Optional[tuple[str, ...]]:
    """The module-level `MEASURES` tuple of a bench script, a literal, with its `@NAME`
    groups expanded (None when it has none, or names a group GROUPS does not have)."""
    try:
        tree = ast.parse(script.read_text())
    except (OSError, SyntaxError):
        return None
    for node in tree.body:
        target = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        if isinstance(target, ast.Name) and target.id == "MEASURES":
            try:
                paths = ast.literal_eval(value)
            except ValueError:
                return None
            if not (isinstance(paths, tuple) and paths and all(isinstance(p, str) for p in paths)):
                return None
            if any(p.startswith("@") and p not in GROUPS for p in paths):
                return None
            return tuple(q for p in paths for q in (GROUPS[p] if p.startswith("@") else (p,)))
    return None


def _git(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                          check=False)  # fmt: skip


def _known(root: Path, commit: str) -> bool:
    return _git(root, "cat-file", "-e", commit + "^{commit}").returncode == 0


def check_one(root: Path, path: Path) -> Status:
    rel = str(path.relative_to(root))
    if path.suffix == ".md":
        return Status(rel, "no-meta", reason="a Markdown result with no JSON (and meta) beside it")
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        return Status(rel, "no-meta", reason=f"unreadable: {e}")
    meta = doc.get("meta") if isinstance(doc, dict) else None
    if not isinstance(meta, dict):
        return Status(rel, "no-meta", reason="no meta")
    script = str(meta.get("script") or "")
    commit = str(meta.get("commit") or "")
    st = Status(rel, "fresh", script=script, commit=commit)
    problems = []
    base = commit.removesuffix("+dirty")
    if not base or base == "unknown":
        problems.append(("no-commit", "meta has no commit"))
    elif not _known(root, base):
        problems.append(("no-commit", f"commit {base} is not in this repository"))
    paths = measures(root / script) if script else None
    if not script:
        problems.append(("no-script", "meta names no script"))
    elif not (root / script).is_file():
        problems.append(("no-script", f"{script} does not exist"))
    elif paths is None:
        problems.append(("no-script", f"{script} declares no MEASURES"))
    if problems or paths is None:
        st.status = problems[0][0]
        st.reason = "; ".join(why for _s, why in problems)
        return st
    # the script itself too: what it measures and how is code that made the result
    diff = _git(root, "diff", "--name-only", base, "HEAD", "--", script, *paths)
    st.changed = [p for p in diff.stdout.splitlines() if p]
    if meta.get("kept_for_history"):
        st.status, st.reason = "history", str(meta["kept_for_history"])
    elif commit.endswith("+dirty"):
        st.status, st.reason = "stale", "measured uncommitted changes (+dirty)"
    elif diff.returncode != 0 or st.changed:
        st.status = "stale"
        st.reason = f"{len(st.changed)} measured file(s) changed since {base}"
    return st


def check(root: Path) -> list[Status]:
    """Every result in ROOT/bench/results, checked against ROOT's HEAD."""
    results = root / "bench" / "results"
    out = []
    for path in sorted(results.glob("*.json")):
        out.append(check_one(root, path))
    for path in sorted(results.glob("*.md")):
        if not path.with_suffix(".json").exists():
            out.append(check_one(root, path))
    return sorted(out, key=lambda s: s.result)


def main(argv: Optional[list[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout")
    ap.add_argument("--root", type=Path, default=TOP, help="repository (default: this one)")
    args = ap.parse_args(argv)
    if not (args.root / "bench" / "results").is_dir():
        print(f"bench/check.py: no bench/results under {args.root}", file=sys.stderr)
        return 2
    statuses = check(args.root)
    bad = [s for s in statuses if s.status in FAILING]
    if args.json:
        doc: dict[str, Any] = {"ok": not bad, "results": [asdict(s) for s in statuses]}
        print(json.dumps(doc, indent=2))
    else:
        for s in statuses:
            what = f"{s.status:9} {s.result}"
            detail = ", ".join(x for x in (s.script, s.commit, s.reason) if x)
            print(f"{what}  ({detail})" if detail else what)
            shown = s.changed if s.status == "stale" else []
            for p in shown[:5]:
                print(f"          changed: {p}")
            if len(shown) > 5:
                print(f"          changed: ... {len(shown) - 5} more")
        print(f"{len(bad)} of {len(statuses)} results to re-measure" if bad
              else f"all {len(statuses)} results describe HEAD")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
