"""The runtime context: one injectable place that says where and how lbtune runs.

Every front end (the click CLI, the Textual monitor, tests) builds one `Runtime` from its
options and hands it to the engine. It owns what used to be scattered over the CLI: which
host tree to read (the live `/`, a fixture directory, a capture or sosreport tarball unpacked
safely to a private temporary directory), which network namespace to join, where the state
directory (journals and the lock) lives, and the streams a front end writes to. Nothing here
imports click, rich or textual, so the engine layers can take a `Runtime` too.

A plain class, not a dataclass: `lbtune --help` imports this module, and importing
dataclasses costs it about 8 ms.
"""

from __future__ import annotations

import os
import sys
from typing import IO, Any, Optional

from lbtune.errors import BadInput


class HostTree:
    """A `--root`/`--baseline` argument opened as a directory to read.

    `path` is the directory lbtune reads below; `source` is what the user named (the
    tarball for a capture, shown in messages and JSON instead of the temporary directory);
    `is_capture` is true when the tree was unpacked from a tarball and so cannot be changed
    meaningfully (apply, rollback and persist refuse it).
    """

    def __init__(self, path: str, source: str, is_capture: bool) -> None:
        self.path = path
        self.source = source
        self.is_capture = is_capture

    @property
    def is_live(self) -> bool:
        return self.path == "/"

    def display(self, text: str) -> str:
        """`text` with the temporary unpack directory replaced by the capture's own name."""
        if self.is_capture and self.path != "/":
            return text.replace(self.path, self.source)
        return text


class Runtime:
    """Where lbtune runs: root, namespace, state directory, output streams and options.

    `root` is `/` (the running machine), a host tree directory, or a capture/sosreport
    tarball. `netns` names a network namespace the process joins (once, when the host is
    first opened). `state_dir` overrides where journals and the lock live (default: the host
    root's `/var/lib/lbtune`, or `$LBTUNE_STATE_DIR`). Streams default to the process's.
    """

    def __init__(
        self,
        root: str = "/",
        netns: Optional[str] = None,
        json: bool = False,
        verbose: int = 0,
        debug: bool = False,
        state_dir: Optional[str] = None,
        stdout: Optional[IO[str]] = None,
        stderr: Optional[IO[str]] = None,
        stdin: Optional[IO[str]] = None,
        environ: Optional[dict[str, str]] = None,
    ) -> None:
        self.root = root
        self.netns = netns
        self.json = json
        self.verbose = verbose
        self.debug = debug
        self.environ = dict(os.environ) if environ is None else environ
        self.state_dir = state_dir or self.environ.get("LBTUNE_STATE_DIR") or None
        self._stdout = stdout
        self._stderr = stderr
        self._stdin = stdin
        self._host: Any = None
        self._tree: Optional[HostTree] = None
        self._entered = False
        self._tempdirs: list[str] = []

    # Streams are resolved on use, so tests that redirect sys.stdout see the output.
    @property
    def stdout(self) -> IO[str]:
        return self._stdout or sys.stdout

    @property
    def stderr(self) -> IO[str]:
        return self._stderr or sys.stderr

    @property
    def stdin(self) -> IO[str]:
        return self._stdin or sys.stdin

    @property
    def interactive(self) -> bool:
        """True when a person can answer a question on stdin."""
        try:
            return self.stdin.isatty()
        except (AttributeError, ValueError):
            return False

    def open_tree(self, path: str, what: str = "--root") -> HostTree:
        """A host tree for `path`: the directory itself, or a capture/sosreport tarball
        unpacked (safely) into a temporary directory that `close()` removes."""
        if path == "/" or os.path.realpath(path) == "/":
            return HostTree("/", "/", False)
        if os.path.isdir(path):
            return HostTree(path, path, False)
        if not os.path.isfile(path):
            raise BadInput(f"{what} {path}: no such directory or capture file")
        import tempfile

        from lbtune.host.capture.unpack import unpack_capture

        tmp = tempfile.mkdtemp(prefix="lbtune-root-")
        self._tempdirs.append(tmp)
        dest = os.path.join(tmp, "root")
        try:
            root = unpack_capture(path, dest)
        except BadInput as e:
            raise BadInput(str(e).replace(dest, path)) from None
        return HostTree(root, path, True)

    @property
    def tree(self) -> HostTree:
        """The host tree `root` names (unpacked on first use)."""
        if self._tree is None:
            tree = self.open_tree(self.root)
            if self.netns is not None and not tree.is_live:
                self._tree = tree  # so close() still removes an unpacked capture
                raise BadInput(
                    "--netns and --root cannot be combined: a namespace is part of the "
                    "running host, --root reads a recorded one"
                )
            self._tree = tree
        return self._tree

    def host(self) -> Any:
        """The `Host` these options name, opened on first use (joining `netns` then)."""
        if self._host is None:
            from lbtune.host.host import Host

            tree = self.tree  # refuses --netns with a --root tree
            if self.netns is not None and not self._entered:
                from lbtune.host.net.netns import enter_netns

                enter_netns(self.netns)
                self._entered = True
            self._host = Host.open(tree.path, netns=self.netns)
        return self._host

    def display(self, text: str) -> str:
        """`text` with temporary unpack paths replaced by the capture's own name."""
        return self._tree.display(text) if self._tree is not None else text

    def close(self) -> None:
        if self._host is not None:
            self._host.close()
            self._host = None
        if self._tempdirs:  # only captures unpack: shutil is 2 ms of every command's start
            import shutil

            for d in self._tempdirs:
                shutil.rmtree(d, ignore_errors=True)
            self._tempdirs.clear()
