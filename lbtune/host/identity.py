"""Which machine, boot and network namespace a host tree shows: whose journal, which captures.

`HostIdentity` is what a journal records (the root's real path, /etc/machine-id, the hostname)
so that rollback never restores one host's values into another. `TreeIdentity` compares two
captures: their counters can be subtracted only when both come from the same namespace of
the same boot of the same machine. A capture's manifest records the namespace and a hash of
`/etc/machine-id` (the id itself is confidential per machine-id(5), and captures are meant to
be handed on); a sosreport has `/etc/machine-id` itself. Unknown parts are None and compare
as "cannot tell", never as a mismatch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from lbtune.host.capture.manifest import read_manifest
from lbtune.host.fs import HostFS


# SHA-256 from the interpreter's own module where it has one: `hashlib` loads OpenSSL
# (libcrypto), ~40 ms of a no-op `lbtune ipvs apply` in the UML lab. Same digests.
def _sha256() -> Any:
    for name in ("_sha256", "_sha2"):  # Python 3.11; 3.12 and later
        try:
            return __import__(name).sha256
        except ImportError:  # pragma: no cover - the other Pythons
            continue
    import hashlib  # pragma: no cover - an interpreter built without them

    return hashlib.sha256  # pragma: no cover


sha256: Callable[[bytes], Any] = _sha256()

MACHINE_ID = "/etc/machine-id"


def machine_hash(machine_id: str) -> str:
    """A short stable digest of a machine id, safe to write into a capture."""
    return str(sha256(machine_id.strip().encode()).hexdigest()[:16])


@dataclass(frozen=True)
class TreeIdentity:
    hostname: Optional[str]
    machine: Optional[str]  # machine_hash of /etc/machine-id
    boot_id: Optional[str]
    netns: Optional[str]  # None: the host's own namespace
    netns_known: bool  # False for trees without an lbtune manifest (sosreport, fixture)


def tree_identity(fs: HostFS) -> TreeIdentity:
    """The identity of the host tree below `fs` (a capture, a sosreport, a directory)."""
    manifest = read_manifest(fs) or {}
    machine = manifest.get("machine")
    if not isinstance(machine, str):
        raw = fs.read(MACHINE_ID)
        machine = machine_hash(raw) if raw and raw.strip() else None
    netns = manifest.get("netns")
    return TreeIdentity(
        hostname=fs.read("/proc/sys/kernel/hostname"),
        machine=machine,
        boot_id=fs.read("/proc/sys/kernel/random/boot_id"),
        netns=netns if isinstance(netns, str) else None,
        netns_known="netns" in manifest,
    )


def mismatch(earlier: TreeIdentity, later: TreeIdentity) -> Optional[str]:
    """Why the counters of `earlier` cannot be subtracted from `later`'s, or None."""
    if earlier.machine and later.machine and earlier.machine != later.machine:
        return (
            f"they come from two machines ({earlier.hostname or '?'}, machine "
            f"{earlier.machine}; {later.hostname or '?'}, machine {later.machine})"
        )
    if earlier.hostname and later.hostname and earlier.hostname != later.hostname:
        return f"they come from two hosts ({earlier.hostname} and {later.hostname})"
    if earlier.netns_known and later.netns_known and earlier.netns != later.netns:

        def name(ns: Optional[str]) -> str:
            return f"namespace {ns}" if ns else "the host's own namespace"

        return (
            f"they come from two network namespaces ({name(earlier.netns)} and "
            f"{name(later.netns)}): their counters are separate"
        )
    if earlier.boot_id and later.boot_id and earlier.boot_id != later.boot_id:
        return "they come from two boots: the counters restarted"
    return None


class HostIdentity:
    """Which machine and tree a journal belongs to: the root's real path, /etc/machine-id
    below it, and the hostname. Rollback compares it before restoring anything."""

    def __init__(self, root: str, machine_id: Optional[str], hostname: Optional[str]) -> None:
        self.root = root
        self.machine_id = machine_id
        self.hostname = hostname

    def mismatch(
        self,
        root: Optional[str],
        machine_id: Optional[str],
        hostname: Optional[str],
        renamed: frozenset[str] = frozenset(),
    ) -> Optional[str]:
        """Why a journal recorded with (root, machine_id, hostname) is not this host's, or
        None. The hostname is only compared when there is no machine-id, and `renamed`
        (the names lbtune's own journals set or replaced through `kernel.hostname`) count
        as this host's: an apply must not make its own rollback foreign."""
        if root != self.root:
            return f"it was written for root {root}, this run's root is {self.root}"
        if machine_id and self.machine_id and machine_id != self.machine_id:
            return f"it was written on machine-id {machine_id}, this host is {self.machine_id}"
        if (
            not machine_id
            and hostname
            and self.hostname
            and self.hostname not in {hostname, *renamed}
        ):
            return f"it was written on host {hostname}, this host is {self.hostname}"
        return None
