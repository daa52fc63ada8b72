"""`ansible-test sanity` on the collection, as Ansible's own CI would run it.

ansible-test builds a venv per sanity test and bootstraps pip into it with get-pip.py from a
host this machine does not reach; tests/fleet/get_pip_offline.py stands in for it (pip from
the Python installation, then the pinned test requirements from the package index). The
venvs are kept in .cache/ansible-test below the repository (HOME for ansible-test only), so
only the first run downloads them (about 2.5 minutes here).
"""

from __future__ import annotations

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


def test_sanity_clean() -> None:
    home = REPO / ".cache" / "ansible-test"
    cache = home / ".ansible" / "test" / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(pathlib.Path(__file__).with_name("get_pip_offline.py"),
                    cache / f"get_pip_{_pip_version().replace('.', '_')}.py")
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    env = dict(os.environ, HOME=str(home), ANSIBLE_NOCOLOR="1",
               PATH=f"{BIN}:{os.environ.get('PATH', '')}")
    proc = subprocess.run([str(BIN / "ansible-test"), "sanity", "--python", py, "--color", "no"],
                          cwd=COLLECTION, capture_output=True, text=True, env=env, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-6000:]
    assert 'Running sanity test "validate-modules"' in out
    assert 'Running sanity test "pylint"' in out
