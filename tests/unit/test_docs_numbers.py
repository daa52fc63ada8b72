"""README and docs numbers are rendered from bench/results (scripts/render_docs.py): the
committed tree renders to itself, a hand edit inside a region fails the check, every result
records its commit, and every region's KEY is registered and every registered KEY is used."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import re
import sys
from types import ModuleType

import pytest

from tests import fixloops

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("render_docs", ROOT / "scripts" /
                                                  "render_docs.py")  # fmt: skip
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["render_docs"] = mod
    spec.loader.exec_module(mod)
    return mod


render = _load()


def test_committed_docs_are_rendered_from_the_results() -> None:
    assert render.differences() == []


def test_a_hand_edit_inside_a_region_fails_the_check(tmp_path: pathlib.Path) -> None:
    text = (ROOT / "README.md").read_text()
    key = "exporter.fixture.series"
    region = f"<!-- gen:{key} -->{render.REGISTRY[key]()}<!-- /gen:{key} -->"
    assert region in text
    edited = text.replace(region, f"<!-- gen:{key} -->999<!-- /gen:{key} -->")
    new, problems = render.render_text(edited)
    assert problems == [] and new == text  # --write puts the result's number back
    (tmp_path / "README.md").write_text(edited)
    (tmp_path / "docs").mkdir()
    diff = render.differences(tmp_path)
    assert len(diff) == 1 and key in diff[0] and "'999'" in diff[0]


def test_a_block_region_is_rendered_between_its_own_lines() -> None:
    text = "a\n<!-- gen:ansible.table -->\nold\n<!-- /gen:ansible.table -->\nb\n"
    new, problems = render.render_text(text)
    assert problems == []
    assert new == f"a\n<!-- gen:ansible.table -->\n{render.md_table('ansible')}\n" \
        "<!-- /gen:ansible.table -->\nb\n"


def test_unknown_keys_and_unbalanced_markers_are_reported() -> None:
    _new, problems = render.render_text("x <!-- gen:no.such -->1<!-- /gen:no.such --> y")
    assert problems == ["no.such: no such key"]
    _new, problems = render.render_text("x <!-- gen:suite.commit -->1 y")
    assert problems == ["unbalanced gen markers"]


def test_every_key_used_is_registered_and_every_registered_key_is_used() -> None:
    used = render.keys_used()
    assert set(used) - set(render.REGISTRY) == set()
    assert set(render.REGISTRY) - set(used) == set()


@pytest.mark.parametrize("path", sorted((ROOT / "bench" / "results").glob("*.json")),
                         ids=lambda p: p.name)  # fmt: skip
def test_every_result_records_its_commit(path: pathlib.Path) -> None:
    meta = json.loads(path.read_text()).get("meta", {})
    assert meta.get("commit") and meta["commit"] != "unknown", path.name


FIX_COUNT = re.compile(r"\b\d+ of (?:the )?\d+ rules\b|\b\d+ fix loops\b|\(\d+ of \d+[;)]")


def test_the_proven_fix_count_is_only_ever_the_rendered_one() -> None:
    """README, docs and CHANGELOG state the proven-fix count only inside a rendered region
    (tests/fixloops.py's, from the loops' own declarations): a count typed by hand, such as
    the "17 of the 18 rules" this project once said in one place and "15 of the 18" in
    another, fails here."""
    files = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
    typed = []
    for path in files:
        outside = render.REGION.sub("", path.read_text())
        typed += [f"{path.name}: {m.group(0)}" for m in FIX_COUNT.finditer(outside)]
    assert typed == []
    assert render.REGISTRY["fixloops.proven"]() == str(len(fixloops.proven_fixes()))
