"""bench/check.py (`make bench-check`) on a throwaway git repository, and the real bench/:
every bench script declares MEASURES, every result names its script."""

from __future__ import annotations

import importlib.util
import json
import pathlib
import subprocess
import sys
from types import ModuleType

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
HELPERS = {"results_io.py", "check.py"}


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_check", BENCH / "check.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["bench_check"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


check = _load()


def git(repo: pathlib.Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(repo), "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True, env=env).stdout.strip()  # fmt: skip


def commit_all(repo: pathlib.Path, msg: str) -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", msg)
    return git(repo, "rev-parse", "--short", "HEAD")


def result(repo: pathlib.Path, name: str, **meta: object) -> None:
    path = repo / "bench" / "results" / f"{name}.json"
    path.write_text(json.dumps({"meta": meta, "results": []}))


@pytest.fixture
def repo(tmp_path: pathlib.Path) -> pathlib.Path:
    git(tmp_path, "init", "-q")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("A = 1\n")
    (tmp_path / "other.py").write_text("B = 1\n")
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "bench" / "a.py").write_text('"""A bench."""\n\nMEASURES = ("pkg",)\n')
    (tmp_path / "bench" / "none.py").write_text('"""No MEASURES."""\n')
    return tmp_path


def statuses(repo: pathlib.Path) -> dict[str, str]:
    return {pathlib.Path(s.result).name: s.status for s in check.check(repo)}


def test_fresh_until_the_measured_code_changes(repo: pathlib.Path) -> None:
    first = commit_all(repo, "code")
    result(repo, "a", script="bench/a.py", commit=first)
    commit_all(repo, "result")
    (repo / "other.py").write_text("B = 2\n")  # not measured by a.py
    commit_all(repo, "other")
    assert statuses(repo) == {"a.json": "fresh"}
    assert check.main(["--root", str(repo)]) == 0

    (repo / "pkg" / "a.py").write_text("A = 2\n")
    commit_all(repo, "measured code")
    [st] = check.check(repo)
    assert st.status == "stale" and st.changed == ["pkg/a.py"]
    assert check.main(["--root", str(repo)]) == 1


def test_a_change_to_the_bench_script_itself_stales_its_result(repo: pathlib.Path) -> None:
    first = commit_all(repo, "code")
    result(repo, "a", script="bench/a.py", commit=first)
    commit_all(repo, "result")
    (repo / "bench" / "a.py").write_text('"""A bench, now measuring more."""\n\n'
                                         'MEASURES = ("pkg",)\n')  # fmt: skip
    commit_all(repo, "the script measures another way")
    [st] = check.check(repo)
    assert st.status == "stale" and st.changed == ["bench/a.py"]


def test_dirty_history_and_missing_facts(repo: pathlib.Path) -> None:
    first = commit_all(repo, "code")
    result(repo, "dirty", script="bench/a.py", commit=first + "+dirty")
    result(repo, "nocommit", script="bench/a.py")
    result(repo, "unknown", script="bench/a.py", commit="0123456")
    result(repo, "noscript", commit=first)
    result(repo, "gone", script="bench/gone.py", commit=first)
    result(repo, "nomeasures", script="bench/none.py", commit=first)
    (repo / "bench" / "results" / "bare.json").write_text("[]")
    (repo / "bench" / "results" / "orphan.md").write_text("| a |\n")
    (repo / "bench" / "results" / "dirty.md").write_text("| a |\n")  # has its JSON
    (repo / "pkg" / "a.py").write_text("A = 2\n")
    later = commit_all(repo, "measured code")
    result(repo, "old", script="bench/a.py", commit=first, kept_for_history="the old code")
    result(repo, "new", script="bench/a.py", commit=later)
    assert statuses(repo) == {
        "bare.json": "no-meta", "dirty.json": "stale", "gone.json": "no-script",
        "new.json": "fresh", "nocommit.json": "no-commit", "nomeasures.json": "no-script",
        "noscript.json": "no-script", "old.json": "history", "orphan.md": "no-meta",
        "unknown.json": "no-commit",
    }


def test_json_output_and_exit_codes(repo: pathlib.Path, capsys: pytest.CaptureFixture[str],
                                    tmp_path_factory: pytest.TempPathFactory) -> None:
    first = commit_all(repo, "code")
    result(repo, "a", script="bench/a.py", commit=first)
    result(repo, "b", script="bench/a.py")
    assert check.main(["--root", str(repo), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["ok"] is False
    assert [(r["result"], r["status"]) for r in doc["results"]] == [
        ("bench/results/a.json", "fresh"), ("bench/results/b.json", "no-commit")]
    # not a repository with results: one line, exit 2
    empty = tmp_path_factory.mktemp("empty")
    assert check.main(["--root", str(empty)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no bench/results" in err


@pytest.mark.parametrize("script", sorted(p.name for p in BENCH.glob("*.py")
                                          if p.name not in HELPERS))  # fmt: skip
def test_every_bench_script_declares_what_it_measures(script: str) -> None:
    paths = check.measures(BENCH / script)
    assert paths, f"bench/{script} has no MEASURES tuple"
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, (script, missing)


def test_every_result_names_an_existing_script() -> None:
    for path in sorted((BENCH / "results").glob("*.json")):
        meta = json.loads(path.read_text()).get("meta", {})
        script = meta.get("script")
        assert script and (ROOT / script).is_file(), (path.name, script)
        assert check.measures(ROOT / script), (path.name, script)
    for path in sorted((BENCH / "results").glob("*.md")):
        assert path.with_suffix(".json").is_file(), f"{path.name} has no JSON (and meta)"


def test_run_meta_records_commit_machine_and_load() -> None:
    sys.path.insert(0, str(BENCH))
    try:
        import results_io
    finally:
        sys.path.remove(str(BENCH))
    meta = results_io.run_meta(3, busy_processes=2, extra="x")
    assert meta["commit"] and meta["commit"] != "unknown"
    m = meta["machine"]
    assert m["cpus"] >= 1 and m["memory_mib"] > 0 and m["kernel"] and m["cpu_model"]
    load = meta["host_load"]
    assert len(load["start"]) == 3 and len(load["end"]) == 3 and load["busy_processes"] == 2
    assert meta["rounds"] == 3 and meta["extra"] == "x"


def test_a_group_in_measures_expands_and_an_unknown_one_is_no_measures(
    tmp_path: pathlib.Path,
) -> None:
    script = tmp_path / "a.py"
    script.write_text('MEASURES = ("@cli", "lbtune/lab")\n')
    assert check.measures(script) == (*check.GROUPS["@cli"], "lbtune/lab")
    script.write_text('MEASURES = ("@nosuch", "lbtune/lab")\n')
    assert check.measures(script) is None
