"""The fixture trees themselves: links stay inside each tree; the generator reproduces them."""

from __future__ import annotations

import importlib.util
import os
import pathlib
import sys

import pytest

from tests.conftest import AWS, DELL, HOSTS, KVM, TINY, X710

TREES = sorted(p.name for p in HOSTS.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))


def walk(root: pathlib.Path) -> dict[str, tuple[str, str]]:
    """Relative path -> ("link", target) or ("file", content), without following links."""
    out: dict[str, tuple[str, str]] = {}
    for dirpath, dirnames, filenames in os.walk(root):  # followlinks=False
        for name in dirnames + filenames:
            p = pathlib.Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_file():
                out[rel] = ("file", p.read_text(encoding="utf-8"))
    return out


def test_trees_present():
    assert set(TREES) >= {
        DELL,
        KVM,
        AWS,
        TINY,
        X710,
        "broken-sysfs",
        "broken-nic-mtu",
    }


@pytest.mark.parametrize("tree", TREES)
def test_readme_and_relative_links_inside(tree):
    root = (HOSTS / tree).resolve()
    assert (root / "README.md").is_file()
    for rel, (kind, value) in walk(root).items():
        if kind != "link":
            continue
        assert not value.startswith("/"), f"{rel}: absolute link {value}"
        target = pathlib.Path(os.path.realpath(root / rel))
        assert target == root or root in target.parents, f"{rel} -> {value} leaves the tree"
        assert target.exists(), f"{rel} -> {value} dangles"


def test_sysfs_links_look_like_the_kernels():
    root = HOSTS / DELL
    dev = "sys/devices/pci0000:17/0000:17:02.0/0000:18:00.0"
    assert (
        os.readlink(root / "sys/class/net/eno1")
        == "../../devices/pci0000:17/0000:17:02.0/0000:18:00.0/net/eno1"
    )
    assert os.readlink(root / dev / "net/eno1/device") == "../../../0000:18:00.0"
    assert os.readlink(root / dev / "driver") == "../../../../bus/pci/drivers/ixgbe"
    kvm = HOSTS / KVM
    vdev = "sys/devices/pci0000:00/0000:00:03.0/virtio1"
    assert os.readlink(kvm / vdev / "net/ens3/device") == "../../../virtio1"
    assert os.readlink(kvm / vdev / "driver") == "../../../../bus/virtio/drivers/virtio_net"
    assert (
        os.readlink(kvm / "sys/devices/pci0000:00/0000:00:03.0/driver")
        == "../../../bus/pci/drivers/virtio-pci"
    )


def _load_generator():
    spec = importlib.util.spec_from_file_location("fixture_generate", HOSTS / "generate.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    try:
        spec.loader.exec_module(mod)
    finally:
        del sys.modules[spec.name]
    return mod


def test_generator_reproduces_committed_trees(tmp_path):
    gen = _load_generator()
    assert gen.main(["--out", str(tmp_path)]) == 0
    generated = sorted(p.name for p in tmp_path.iterdir())
    assert generated == TREES
    for tree in TREES:
        committed = walk(HOSTS / tree)
        committed.pop("README.md")
        fresh = walk(tmp_path / tree)
        missing = sorted(set(fresh) - set(committed))
        extra = sorted(set(committed) - set(fresh))
        assert not missing and not extra, (
            f"{tree}: regenerate (missing {missing[:5]}, extra {extra[:5]})"
        )
        changed = sorted(k for k in fresh if fresh[k] != committed[k])
        assert not changed, f"{tree}: files differ from generate.py output: {changed[:5]}"
