"""Tab completion through click's own protocol, as the shells' scripts run it: a fresh
`python -m lbtune` with `_LBTUNE_COMPLETE=bash_complete` (zsh_complete, fish_complete) and the
words in COMP_WORDS/COMP_CWORD, its answer parsed the way each script reads it.

Every kind the issue names is completed here: commands, options, profile names (shipped, and
one in the host's own directory below a --root tree), network interfaces (this host's, a
--root tree's, and those of a throwaway namespace named by --netns), IPVS config files in a
temp directory. bash loads the script `lbtune completion bash` prints and completes through it;
zsh and fish only where installed (neither is on this project's machine; nothing is
installed for them).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
from typing import Iterator, Optional

import click
import pytest

from tests.conftest import needs_root

ROOT = pathlib.Path(__file__).resolve().parents[2]
SHIPPED = sorted(p.stem for p in (ROOT / "profiles").glob("*.toml"))


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LBTUNE_", "_LBTUNE"))}
    env.update(PYTHONPATH=str(ROOT), **extra)
    return env


def complete(line: str, sh: str = "bash", cwd: Optional[pathlib.Path] = None) -> list[str]:
    """The candidates lbtune answers for the cursor at the end of `line`, as shell `sh` sees
    them."""
    words = line.split()
    if sh == "fish":  # fish: the whole line, and the word being typed on its own
        partial = "" if line.endswith(" ") else words[-1]
        env = _env(_LBTUNE_COMPLETE="fish_complete", COMP_WORDS=line, COMP_CWORD=partial)
    else:
        cword = len(words) if line.endswith(" ") else len(words) - 1
        env = _env(_LBTUNE_COMPLETE=f"{sh}_complete", COMP_WORDS=line, COMP_CWORD=str(cword))
    r = subprocess.run([sys.executable, "-m", "lbtune"], capture_output=True, text=True,
                       env=env, cwd=cwd, check=False)  # fmt: skip
    assert r.returncode == 0 and r.stderr == "", (r.returncode, r.stderr)
    lines = r.stdout.splitlines()
    if sh == "zsh":  # type, value, help: three lines each
        return [lines[i + 1] for i in range(0, len(lines) - 2, 3) if lines[i] == "plain"]
    out = []
    for entry in lines:
        kind, _, value = entry.partition(",")
        if kind == "plain":
            out.append(value.split("\t")[0])
        elif entry:
            out.append(f"<{kind}>")
    return out


@pytest.mark.parametrize("shell", ["bash", "zsh", "fish"])
def test_commands_and_options(shell):
    top = complete("lbtune ", sh=shell)
    assert top == sorted(top) and {"apply", "ipvs", "lab", "completion", "show"} <= set(top)
    assert complete("lbtune ipvs a", sh=shell) == ["adapt", "agent", "apply"]
    assert complete("lbtune ipvs realserver ", sh=shell) == ["apply", "teardown", "verify"]
    opts = complete("lbtune show --", sh=shell)
    assert {"--iface", "--all", "--json", "--netns", "--root", "--help"} <= set(opts)
    assert complete("lbtune completion ", sh=shell) == ["bash", "zsh", "fish"]


def test_command_names_come_without_importing_every_command():
    code = (
        "import sys\n"
        "sys.argv = ['lbtune']\n"
        "from lbtune.cli.entry import main\n"
        "try:\n"
        "    main()\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(sorted(m for m in sys.modules if m.startswith('lbtune.cli.')), file=sys.stderr)\n"
    )
    env = _env(_LBTUNE_COMPLETE="bash_complete", COMP_WORDS="lbtune ", COMP_CWORD="1")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       check=True)  # fmt: skip
    assert "plain,apply" in r.stdout
    assert r.stderr.strip() == "['lbtune.cli.complete', 'lbtune.cli.entry', 'lbtune.cli.main']"


def test_profile_names_shipped_and_the_hosts_own(tmp_path):
    assert SHIPPED and complete("lbtune apply ", cwd=tmp_path) == [*SHIPPED]
    mine = tmp_path / "etc" / "lbtune" / "profiles"
    mine.mkdir(parents=True)
    (mine / "edge-lb.toml").write_text('[sysctl]\n"net.core.somaxconn" = 4096\n')
    (mine / "web.toml").write_text("")  # shadows the shipped one: listed once
    names = complete(f"lbtune --root {tmp_path} plan ", cwd=mine)  # its own .toml files too
    assert names == [*sorted({*SHIPPED, "edge-lb"}), "edge-lb.toml", "web.toml"]
    empty = tmp_path / "empty"
    empty.mkdir()
    names = complete(f"lbtune --root {tmp_path} plan ", cwd=empty)
    assert names == sorted({*SHIPPED, "edge-lb"})
    assert complete(f"lbtune plan --root {tmp_path} e") == ["edge-lb"]  # --root after the command
    assert complete(f"lbtune --root {tmp_path} profile show lb-") == ["lb-dr", "lb-proxy"]
    assert complete(f"lbtune --root {tmp_path} exporter --profile ed") == ["edge-lb"]


def test_profile_files_beside_the_names(tmp_path):
    (tmp_path / "fix.toml").write_text("")
    (tmp_path / "notes.txt").write_text("")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "deep.toml").write_text("")
    assert complete("lbtune apply f", cwd=tmp_path) == ["fix.toml"]
    assert complete("lbtune apply s", cwd=tmp_path) == ["sub/"]
    assert complete("lbtune apply sub/", cwd=tmp_path) == ["sub/deep.toml"]


def test_the_lookup_is_the_loaders(tmp_path):
    """The completer's profile directories are lbtune.tune.profile.load's (which it does not
    import: that costs a tenth of a second)."""
    from lbtune.cli.complete import profile_dirs
    from lbtune.tune.profile.load import profile_dirs as loaders

    for root in ("/", str(tmp_path)):
        assert profile_dirs(root) == [str(d) for d in loaders(root)]


def test_ipvs_config_files(tmp_path):
    for name in ("dr.toml", "dr-v6.toml", "README.md", ".hidden.toml"):
        (tmp_path / name).write_text("")
    (tmp_path / "sites").mkdir()
    (tmp_path / "sites" / "edge.toml").write_text("")
    assert complete("lbtune ipvs apply ", cwd=tmp_path) == ["dr-v6.toml", "dr.toml", "sites/"]
    assert complete("lbtune ipvs plan d", cwd=tmp_path) == ["dr-v6.toml", "dr.toml"]
    assert complete(f"lbtune ipvs adapt {tmp_path}/si") == [f"{tmp_path}/sites/"]
    assert complete(f"lbtune ipvs status {tmp_path}/sites/") == [f"{tmp_path}/sites/edge.toml"]
    assert complete("lbtune ipvs export --format ipvsadm s", cwd=tmp_path) == ["sites/"]


def test_interfaces_of_this_host_and_of_a_root_tree(tmp_path, hosts):
    assert complete("lbtune show --iface ") == sorted(os.listdir("/sys/class/net"))
    tree = hosts / "dell-r750-mlx5-ixgbe"
    want = sorted(os.listdir(tree / "sys" / "class" / "net"))
    assert complete(f"lbtune --root {tree} show --iface ") == want
    assert complete(f"lbtune diagnose --root {tree} --iface ") == want
    first = want[0]
    assert complete(f"lbtune --root {tree} exporter --queues {first},") == [
        f"{first},{n}" for n in want[1:]
    ]


@pytest.fixture
def netns_with_veth() -> Iterator[str]:
    name = f"lbtune-comp{os.getpid()}"
    subprocess.run(["ip", "netns", "add", name], check=True)
    try:
        subprocess.run(["ip", "-n", name, "link", "add", "data0", "type", "veth", "peer", "name",
                        "peer0"], check=True)  # fmt: skip
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], check=False)


@needs_root
def test_interfaces_and_names_of_a_namespace(netns_with_veth):
    ns = netns_with_veth
    assert ns in complete("lbtune --netns ")
    assert complete(f"lbtune --netns {ns[:-2]}") == [ns]
    want = ["data0", "lo", "peer0"]
    assert complete(f"lbtune --netns {ns} show --iface ") == want
    assert complete(f"lbtune show --netns {ns} --iface d") == ["data0"]  # after the command
    assert complete(f"lbtune --netns {ns} ipvs realserver apply --iface p") == ["peer0"]
    assert complete(f"lbtune --netns {ns} ipvs agent --egress ", sh="zsh") == want
    assert complete(f"lbtune --netns {ns} probe drops --iface ", sh="fish") == want
    assert complete(f"lbtune ipvs selftest x.toml --from-netns {ns}") == [ns]


def test_a_host_it_cannot_read_gives_no_candidates(tmp_path):
    assert complete(f"lbtune --root {tmp_path}/missing show --iface ") == []
    assert complete("lbtune --netns no-such-ns show --iface ") == []
    assert complete("lbtune --netns ../../etc show --iface ") == []
    assert complete("lbtune ipvs apply /no/such/dir/") == []
    assert "--root" in complete("lbtune frobnicate --")  # no such command: no error


def test_paths_are_left_to_the_shell():
    assert complete("lbtune --root ") == ["<file>"]
    assert complete("lbtune capture -o ") == ["<file>"]
    assert complete("lbtune exporter --textfile ") == ["<dir>"]


def test_every_interface_namespace_and_path_option_completes():
    """A parameter named for an interface, a namespace, a profile or a config has a
    completer: a new `--iface` without one fails here."""
    from lbtune.cli.main import cli

    kinds = {"IF": "interfaces", "IF[,IF]": "interface_lists", "IFACE": "interfaces",
             "NS": "namespaces", "DIR": None, "FILE": None, "CAPTURE": None,
             "FILE.toml": None, "FILE.tar.gz": None, "CAPTURE...": None}  # fmt: skip
    missing = []

    def walk(cmd: click.Command, path: str, ctx: click.Context) -> None:
        for p in cmd.params:
            named = p.name in ("profile", "profiles", "config", "netns") or (
                p.name == "name" and "profile" in path
            )
            if (p.metavar in kinds or named) and p._custom_shell_complete is None:
                missing.append(f"{path} {p.name}")
        if isinstance(cmd, click.Group):
            for n in cmd.list_commands(ctx):
                sub = cmd.get_command(ctx, n)
                assert sub is not None
                walk(sub, f"{path} {n}", ctx)

    walk(cli, "lbtune", click.Context(cli))
    assert missing == []


def test_bash_loads_the_script_and_completes_through_it(tmp_path):
    """The script `lbtune completion bash` prints, sourced by a real bash, whose completion
    function is then called as bash calls it on Tab."""
    argv = [sys.executable, "-m", "lbtune", "completion", "bash"]
    script = subprocess.run(argv, capture_output=True, text=True, env=_env(), check=True).stdout
    assert "complete -o nosort -F _lbtune_completion lbtune" in script
    shim = tmp_path / "bin"
    shim.mkdir()
    (shim / "lbtune").write_text(f'#!/bin/sh\nexec {sys.executable} -m lbtune "$@"\n')
    (shim / "lbtune").chmod(0o755)
    test = (
        'source <(lbtune completion bash) || exit 9\n'
        'complete -p lbtune || exit 8\n'
        'COMP_WORDS=(lbtune ipvs a); COMP_CWORD=2\n'
        '_lbtune_completion lbtune\n'
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )  # fmt: skip
    env = _env(PATH=f"{shim}:{os.environ['PATH']}")
    r = subprocess.run(["bash", "--norc", "--noprofile", "-c", test], capture_output=True,
                       text=True, env=env, check=False)  # fmt: skip
    assert r.returncode == 0 and r.stderr == "", r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "complete -o nosort -F _lbtune_completion lbtune"
    assert lines[1:] == ["adapt", "agent", "apply"]


def test_zsh_and_fish_scripts_and_the_installed_shells_load_them(tmp_path):
    """The zsh and fish scripts are click's, registered for `lbtune`; a shell that is
    installed sources its script without an error (neither is on this project's machine, and
    tests install nothing: the protocol each script speaks is tested above)."""
    marks = {
        "zsh": "compdef _lbtune_completion lbtune",
        "fish": 'complete --no-files --command lbtune --arguments "(_lbtune_completion)"',
    }
    for shell, mark in marks.items():
        text = subprocess.run(
            [sys.executable, "-m", "lbtune", "completion", shell],
            capture_output=True,
            text=True,
            env=_env(),
            check=True,
        ).stdout
        assert mark in text and "_LBTUNE_COMPLETE=" in text
        exe = shutil.which(shell)
        if exe is None:
            continue
        script = tmp_path / f"lbtune.{shell}"
        script.write_text(text)
        test = (
            f"autoload -U compinit && compinit -u; source {script}"
            if shell == "zsh"
            else f"source {script}"
        )
        r = subprocess.run(
            [exe, "-c", test], capture_output=True, text=True, env=_env(), check=False
        )
        assert r.returncode == 0 and "error" not in r.stderr.lower(), r.stderr


def test_completion_command_refuses_other_shells(cli):
    r = cli("completion", "tcsh")
    assert r.exit_code == 2 and "tcsh" in r.stderr
