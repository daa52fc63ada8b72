"""`ansible-test sanity` on the collection, as Ansible's own CI would run it.

ansible-test builds a venv per sanity test and bootstraps pip into it with get-pip.py from a
host this machine does not reach; tests/fleet/get_pip_offline.py stands in for it (pip from
the Python installation, then the pinned test requirements from the package index). The
venvs are kept in the user's cache, $XDG_CACHE_HOME/lbtune/ansible-test (default
~/.cache/lbtune/ansible-test; HOME for ansible-test only), so only the first run on a machine
builds them (about 2.5 minutes here) and a fresh clone reuses them. ansible-test keys each
venv by its requirements; runs from several clones take turns on a lock in that directory.
"""

from __future__ import annotations

import fcntl
import os
import pathlib
import re
import shutil
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
COLLECTION = REPO / "ansible" / "ansible_collections" / "lbtune" / "fleet"
BIN = pathlib.Path(sys.executable).parent


def _pip_version() -> str:
    """The pip version ansible-test bootstraps (its get_pip_<version>.py cache name)."""
    import ansible_test

    src = pathlib.Path(ansible_test.__file__).parent / "_internal" / "python_requirements.py"
    m = re.search(r"pip='([\d.]+)'", src.read_text())
    assert m, f"no default pip version in {src}: ansible-test changed, update this test"
    return m.group(1)


def _home() -> pathlib.Path:
    """ansible-test's HOME: its venvs outlive the clone (see the module doc)."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(pathlib.Path.home() / ".cache")
    return pathlib.Path(cache) / "lbtune" / "ansible-test"


def test_sanity_clean() -> None:
    home = _home()
    cache = home / ".ansible" / "test" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    env = dict(os.environ, HOME=str(home), ANSIBLE_NOCOLOR="1",
               PATH=f"{BIN}:{os.environ.get('PATH', '')}")
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another clone's run may be building the venvs
        shutil.copyfile(pathlib.Path(__file__).with_name("get_pip_offline.py"),
                        cache / f"get_pip_{_pip_version().replace('.', '_')}.py")
        proc = subprocess.run([str(BIN / "ansible-test"), "sanity", "--python", py,
                               "--color", "no"], cwd=COLLECTION, capture_output=True,
                              text=True, env=env, timeout=900)  # fmt: skip
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert 'Running sanity test "validate-modules"' in out
    assert 'Running sanity test "pylint"' in out
