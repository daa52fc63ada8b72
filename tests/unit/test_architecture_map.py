"""docs/architecture.md is the map of the code: it must name every module, and only modules
that exist.

The module map section is generated from the modules' docstrings
(scripts/architecture_map.py); the hand-written sections name modules in prose and
diagrams. Both are checked here, so a module added, moved or removed without the map fails.
"""

from __future__ import annotations

import importlib
import re
import sys
from pathlib import Path

TOP = Path(__file__).resolve().parents[2]
DOC = TOP / "docs" / "architecture.md"

sys.path.insert(0, str(TOP / "scripts"))
import architecture_map  # noqa: E402

LAYERS = ("cli", "tui", "exporter", "diagnose", "ipvs", "lab", "tune", "observe", "host")
# a module as prose and diagrams write it: lbtune/host/net/addr.py, host/net/addr.py,
# lab/launch.run (a module, then one of its names)
PATH = re.compile(r"(?<![\w./-])(?:lbtune/)?((?:" + "|".join(LAYERS) + r")(?:/\w+)+)(?=\.\w)")
# a dotted module name: lbtune.host.net.addr (an attribute after it is allowed)
DOTTED = re.compile(r"\blbtune(?:\.\w+)+(?![\w=])")


def _hand_written() -> str:
    text = DOC.read_text(encoding="utf-8")
    return text.replace(architecture_map.current(text), "")


def test_module_map_is_the_codes() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert architecture_map.current(text), "docs/architecture.md has no module map markers"
    assert architecture_map.current(text) == architecture_map.render(), (
        "the module map in docs/architecture.md is not the code's: run "
        "python scripts/architecture_map.py --write"
    )


def test_every_module_is_in_the_map() -> None:
    text = DOC.read_text(encoding="utf-8")
    missing = [
        p.relative_to(TOP).as_posix()
        for p in sorted((TOP / "lbtune").rglob("*.py"))
        if f"`{p.relative_to(TOP).as_posix()}`" not in text and p.name != "__init__.py"
    ]
    folders = [
        p.parent.relative_to(TOP).as_posix() + "/"
        for p in sorted((TOP / "lbtune").rglob("__init__.py"))
        if f"`{p.parent.relative_to(TOP).as_posix()}/`" not in text
    ]
    assert not missing and not folders, f"not in docs/architecture.md: {missing + folders}"


def test_every_module_the_prose_names_exists() -> None:
    prose = _hand_written()
    named = set(PATH.findall(prose))
    assert named, "the hand-written sections name no module paths: the pattern is wrong"
    gone = sorted(
        n for n in named
        if not (TOP / "lbtune" / f"{n}.py").is_file() and not (TOP / "lbtune" / n).is_dir()
    )
    assert not gone, f"docs/architecture.md names modules that do not exist: {gone}"


def test_every_dotted_name_the_prose_uses_resolves() -> None:
    prose = _hand_written()
    names = set(DOTTED.findall(prose))
    assert names

    def resolves(name: str) -> bool:
        # the longest importable prefix is a module of lbtune; what follows it must be its
        # attributes (lbtune.host.runtime.Runtime), never a module that does not exist
        parts = name.split(".")
        for n in range(len(parts), 0, -1):
            try:
                obj: object = importlib.import_module(".".join(parts[:n]))
            except ImportError:
                continue
            for attr in parts[n:]:
                if not hasattr(obj, attr):
                    return False
                obj = getattr(obj, attr)
            return True
        return False

    bad = sorted(n for n in names if not resolves(n))
    assert not bad, f"docs/architecture.md names modules that do not exist: {bad}"
