"""Build lbtune's wheel and its Debian 12 package from this checkout, without network.

Usage: python scripts/deb.py wheel|deb [--build DIR] [--wheelhouse DIR]
       (`make wheel`, `make deb`; `make setup` fills the wheelhouse: scripts/wheelhouse.sh)

`wheel` builds DIR/dist/lbtune-VERSION-py3-none-any.whl (hatchling, from the wheelhouse).
`deb` builds DIR/lbtune_VERSION_all.deb with dpkg-deb (docs/install.md, "What the package
holds"): the wheel and the pure-Python libraries of packaging/bundle.txt installed in
/usr/lib/lbtune, the /usr/bin/lbtune launcher that puts them first on sys.path, the units of
packaging/systemd and their option files (conffiles under /etc/default), the man pages and
completion scripts (`make man`, `make completion`, already in DIR), the alert rules, the
drop-in examples and the docs. Maintainer scripts byte-compile the private tree
(py3compile) and reload systemd when it runs; nothing is enabled or started.

Every file's mtime is the last commit's time (SOURCE_DATE_EPOCH when set), so two builds of
one commit give the same package. The result passes lintian with packaging/lintian-overrides,
whose every line says why (tests/unit/test_deb.py).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

TOP = Path(__file__).resolve().parents[1]
PKG = TOP / "packaging"
NAME = "lbtune"
PRIVATE = "/usr/lib/lbtune"  # the bundled tree (a private module directory)
UNIT_DIR = "/lib/systemd/system"  # Debian 12's (dh_installsystemd's) place for units
COMPLETION = {  # build/completion/NAME -> its place (lbtune.cli.complete.INSTALL_PATHS)
    "lbtune": "/usr/share/bash-completion/completions/lbtune",
    "_lbtune": "/usr/share/zsh/vendor-completions/_lbtune",
    "lbtune.fish": "/usr/share/fish/vendor_completions.d/lbtune.fish",
}
DEPENDS = "python3 (>= 3.9), python3-psutil (>= 5.9)"
RECOMMENDS = "python3-bpfcc, iproute2, ethtool"
SUGGESTS = "ipvsadm, prometheus, linux-headers-amd64"
MAINTAINER = "lbtune developers <lbtune@lists.example.org>"
LAUNCHER = f'''#!/usr/bin/python3 -I
"""lbtune as the Debian package installs it: the libraries it bundles in {PRIVATE} come
before the distro's (docs/install.md, "Why bundled"); -I keeps PYTHONPATH and the user's
site-packages out, so the installed lbtune is the one that runs."""
import sys

sys.path.insert(0, "{PRIVATE}")
from lbtune.cli.entry import main  # noqa: E402

main()
'''
UNITS = ("lbtune-exporter.service", "lbtune-agent.service", "lbtune-ipvs-serve.service",
         "lbtune-adapt@.service")  # fmt: skip
POSTINST = f"""#!/bin/sh
# lbtune: byte-compile the private module tree (not Pygments' lexers, styles and formatters
# for hundreds of languages lbtune never highlights: a quarter of the tree's compile time);
# tell a running systemd about the units (none is enabled or started:
# `systemctl enable --now lbtune-exporter`, docs/install.md).
set -e
if [ "$1" = configure ]; then
    if command -v py3compile >/dev/null 2>&1; then
        py3compile -p {NAME} -X 'pygments/(lexers|styles|formatters)/' {PRIVATE}
    fi
    if [ -d /run/systemd/system ]; then
        systemctl --system daemon-reload >/dev/null || true
    fi
fi
exit 0
"""
PRERM = f"""#!/bin/sh
# lbtune: stop its running units before removal; drop the byte-compiled files.
set -e
if [ "$1" = remove ] && [ -d /run/systemd/system ]; then
    deb-systemd-invoke stop {" ".join(u for u in UNITS if "@" not in u)} \\
        'lbtune-adapt@*.service' >/dev/null 2>&1 || true
fi
if command -v py3clean >/dev/null 2>&1; then
    py3clean -p {NAME}
else
    find {PRIVATE} -type d -name __pycache__ -prune -exec rm -rf {{}} +
fi
exit 0
"""
POSTRM = f"""#!/bin/sh
# lbtune: forget the units (and, on purge, the links `systemctl enable` made).
set -e
if [ -d /run/systemd/system ]; then
    systemctl --system daemon-reload >/dev/null || true
fi
if [ "$1" = purge ] && command -v deb-systemd-helper >/dev/null 2>&1; then
    deb-systemd-helper purge {" ".join(u for u in UNITS if "@" not in u)} >/dev/null || true
fi
exit 0
"""


def version() -> str:
    text = (TOP / "lbtune" / "__init__.py").read_text()
    m = re.search(r'^__version__ = "([^"]+)"', text, re.M)
    if not m:
        raise SystemExit("deb: no __version__ in lbtune/__init__.py")
    return m.group(1)


def epoch() -> int:
    if os.environ.get("SOURCE_DATE_EPOCH"):
        return int(os.environ["SOURCE_DATE_EPOCH"])
    out = subprocess.run(["git", "-C", str(TOP), "log", "-1", "--format=%ct"],
                         capture_output=True, text=True, check=False).stdout.strip()  # fmt: skip
    return int(out) if out else 0


def default_wheelhouse() -> Path:
    env = os.environ.get("LBTUNE_WHEELHOUSE")
    if env:
        return Path(env)
    if os.geteuid() == 0:
        return Path("/var/cache/lbtune/wheels")
    return Path.home() / ".cache" / "lbtune" / "wheels"


def run(argv: list[str], **kw: object) -> None:
    r = subprocess.run(argv, capture_output=True, text=True, check=False, **kw)  # type: ignore[call-overload]
    if r.returncode != 0:
        raise SystemExit(f"deb: {' '.join(argv[:4])} ...: exit {r.returncode}\n"
                         f"{r.stdout[-2000:]}{r.stderr[-2000:]}")  # fmt: skip


def pip(python: str, wheelhouse: Path, *args: str) -> None:
    if not wheelhouse.is_dir():
        raise SystemExit(f"deb: no wheelhouse at {wheelhouse}: run `make setup` (or "
                         "bash scripts/wheelhouse.sh) once with network")
    run([python, "-m", "pip", *args, "--no-index", "--find-links", str(wheelhouse),
         "--disable-pip-version-check", "-q"])


def build_wheel(build: Path, wheelhouse: Path, python: str) -> Path:
    dist = build / "dist"
    dist.mkdir(parents=True, exist_ok=True)
    for old in dist.glob(f"{NAME}-*.whl"):
        old.unlink()
    env_epoch = str(epoch())
    os.environ.setdefault("SOURCE_DATE_EPOCH", env_epoch)  # hatchling: reproducible zip
    pip(python, wheelhouse, "wheel", "--no-deps", "-w", str(dist), str(TOP))
    wheels = sorted(dist.glob(f"{NAME}-{version()}-*.whl"))
    if len(wheels) != 1:
        raise SystemExit(f"deb: expected one wheel in {dist}, found {wheels}")
    print(wheels[0])
    return wheels[0]


def put(root: Path, dest: str, data: bytes, mode: int = 0o644) -> None:
    path = root / dest.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)


def gz(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=9, mtime=0)


def changelog(ver: str, when: int) -> bytes:
    import email.utils

    date = email.utils.formatdate(when, usegmt=False).replace("-0000", "+0000")
    return (f"{NAME} ({ver}) bookworm; urgency=medium\n\n"
            "  * Built from the lbtune repository by `make deb` (scripts/deb.py); the\n"
            "    project's own changes are in /usr/share/doc/lbtune/changelog.gz.\n\n"
            f" -- {MAINTAINER}  {date}\n").encode()  # fmt: skip


def copyright_file(root: Path) -> bytes:
    """DEP-5: lbtune's licence, then each bundled library's, as its metadata names it."""
    parts = ["Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/",
             f"Upstream-Name: {NAME}", "", "Files: *",
             f"Copyright: {time.gmtime(epoch()).tm_year} lbtune developers", "License: Apache-2.0",
             " On Debian systems, the full text of the Apache License, Version 2.0 can be",
             " found in the file /usr/share/common-licenses/Apache-2.0.", ""]  # fmt: skip
    for meta in sorted((root / PRIVATE.lstrip("/")).glob("*.dist-info")):
        if meta.name.startswith(f"{NAME}-"):
            continue
        fields = {}
        for line in (meta / "METADATA").read_text(errors="replace").splitlines():
            if not line.strip():
                break
            k, _, v = line.partition(": ")
            fields.setdefault(k, v.strip())
        lic = fields.get("License-Expression") or fields.get("License") or ""
        if not lic or len(lic) > 60:
            classifiers = [ln.split("::")[-1].strip() for ln in
                           (meta / "METADATA").read_text(errors="replace").splitlines()
                           if ln.startswith("Classifier: License ::")]  # fmt: skip
            lic = classifiers[0] if classifiers else "see its dist-info"
        top = meta.name.split("-")[0]
        holder = fields.get("Author") or fields.get("Author-email") or f"the {top} authors"
        parts += [f"Files: {PRIVATE.lstrip('/')}/{top}*", f"Copyright: {holder}",
                  f"License: {lic}", f" The licence text is in {PRIVATE}/{meta.name}/ "
                  "(bundled, see docs/install.md).", ""]  # fmt: skip
    return "\n".join(parts).encode()


def stage(build: Path, wheel: Path, wheelhouse: Path, python: str) -> Path:
    ver = version()
    root = build / "deb" / f"{NAME}_{ver}_all"
    if root.exists():
        shutil.rmtree(root)
    private = root / PRIVATE.lstrip("/")
    pip(python, wheelhouse, "install", "--target", str(private), "--no-compile",
        "-r", str(PKG / "bundle.txt"))
    pip(python, wheelhouse, "install", "--target", str(private), "--no-compile", "--no-deps",
        "--upgrade", str(wheel))
    shutil.rmtree(private / "bin", ignore_errors=True)  # pip's console scripts (venv shebangs)
    for module in private.rglob("*.py"):  # a module's own `#!python` line: not a program here
        text = module.read_bytes()
        if text.startswith(b"#!"):
            module.write_bytes(b"# " + text[2:])  # the same line, now a comment
    for junk in private.rglob("__pycache__"):
        shutil.rmtree(junk)
    for info in private.glob("*.dist-info"):
        for name in ("RECORD", "INSTALLER", "REQUESTED", "direct_url.json"):
            (info / name).unlink(missing_ok=True)  # paths of this build machine
    put(root, "/usr/bin/lbtune", LAUNCHER.encode(), 0o755)
    for unit in UNITS:
        put(root, f"{UNIT_DIR}/{unit}", (PKG / "systemd" / unit).read_bytes())
    conffiles = []
    for default in sorted((PKG / "default").iterdir()):
        dest = f"/etc/default/{default.name}"
        put(root, dest, default.read_bytes())
        conffiles.append(dest)
    (root / "etc" / "lbtune" / "ipvs").mkdir(parents=True)
    man = build / "man"
    comp = build / "completion"
    if not (man / "lbtune.8").is_file() or not all((comp / n).is_file() for n in COMPLETION):
        raise SystemExit(f"deb: no man pages or completion in {build}: `make man completion`")
    for page in sorted(man.glob("*.8")):
        put(root, f"/usr/share/man/man8/{page.name}.gz", gz(page.read_bytes()))
    for src, dest in COMPLETION.items():
        put(root, dest, (comp / src).read_bytes())
    put(root, "/usr/share/lbtune/alerts/lbtune.rules.yml",
        (TOP / "docs" / "alerts" / "lbtune.rules.yml").read_bytes())
    doc = f"/usr/share/doc/{NAME}"
    for ex in sorted((PKG / "examples").iterdir()):
        put(root, f"{doc}/examples/{ex.name}", ex.read_bytes())
    put(root, f"{doc}/install.md.gz", gz((TOP / "docs" / "install.md").read_bytes()))
    put(root, f"{doc}/README.md.gz", gz((TOP / "README.md").read_bytes()))
    put(root, f"{doc}/changelog.gz", gz((TOP / "CHANGELOG.md").read_bytes()))
    when = epoch()
    put(root, f"{doc}/changelog.Debian.gz", gz(changelog(ver, when)))
    put(root, f"{doc}/copyright", copyright_file(root))
    put(root, f"/usr/share/lintian/overrides/{NAME}", (PKG / "lintian-overrides").read_bytes())
    # control files
    size = sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) // 1024 + 1
    control = (f"Package: {NAME}\nVersion: {ver}\nArchitecture: all\n"
               f"Maintainer: {MAINTAINER}\nInstalled-Size: {size}\n"
               f"Depends: {DEPENDS}\nRecommends: {RECOMMENDS}\nSuggests: {SUGGESTS}\n"
               "Section: admin\nPriority: optional\n"
               "Homepage: https://github.com/lbtune/lbtune\n"
               "Description: host tuning and packet-drop diagnostics for Linux load balancers\n"
               " lbtune finds why a load-balancer or web host drops packets (counters,\n"
               " sock_diag, tracepoint probes), tunes it from profiles with a journal and\n"
               " rollback, configures IPVS direct routing, and exports Prometheus metrics.\n"
               " .\n"
               " This package bundles the Python libraries Debian 12 ships too old (pyroute2,\n"
               " textual, rich) in /usr/lib/lbtune and installs systemd units for the\n"
               " exporter, the node agent, ipvs adapt and ipvs serve.\n")  # fmt: skip
    meta = root / "DEBIAN"
    meta.mkdir()
    put(root, "/DEBIAN/control", control.encode())
    put(root, "/DEBIAN/conffiles", ("\n".join(conffiles) + "\n").encode())
    for name, text in (("postinst", POSTINST), ("prerm", PRERM), ("postrm", POSTRM)):
        put(root, f"/DEBIAN/{name}", text.encode(), 0o755)
    sums = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root)
        if p.is_file() and rel.parts[0] != "DEBIAN" and f"/{rel}" not in conffiles:
            sums.append(f"{hashlib.md5(p.read_bytes()).hexdigest()}  {rel}")  # noqa: S324
    put(root, "/DEBIAN/md5sums", ("\n".join(sums) + "\n").encode())
    programs = {root / "usr" / "bin" / NAME, *(meta / n for n in ("postinst", "prerm", "postrm"))}
    for p in root.rglob("*"):  # dpkg-deb --root-owner-group: root:root; one time for all
        # bundled modules pip left executable are modules, not programs: 0644
        p.chmod(0o755 if p.is_dir() or p in programs else 0o644)
        os.utime(p, (when, when), follow_symlinks=False)
    os.utime(root, (when, when))
    return root


def build_deb(build: Path, wheelhouse: Path, python: str) -> Path:
    wheel = build_wheel(build, wheelhouse, python)
    root = stage(build, wheel, wheelhouse, python)
    out = build / f"{root.name}.deb"
    env = {**os.environ, "SOURCE_DATE_EPOCH": str(epoch())}
    run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", str(root), str(out)], env=env)
    print(out)
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=["wheel", "deb"])
    ap.add_argument("--build", type=Path, default=TOP / "build")
    ap.add_argument("--wheelhouse", type=Path, default=None)
    ap.add_argument("--python", default=sys.executable, help="the Python that runs pip")
    args = ap.parse_args(argv)
    wheelhouse = args.wheelhouse or default_wheelhouse()
    build = args.build.resolve()
    if args.what == "wheel":
        build_wheel(build, wheelhouse, args.python)
    else:
        build_deb(build, wheelhouse, args.python)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
