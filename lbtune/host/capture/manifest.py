"""A capture's manifest: `lbtune-capture.json` at the root of the tree, and how to read it.

The manifest says what wrote the capture (version, time, hostname, kernel, namespace, a hash of
the machine id) and what it holds. Writing it is host/capture/write.py's; reading it is here,
apart from the writer, because the host's identity (host/identity.py) reads it for every tree
and must not depend on the code that takes captures.
"""

from __future__ import annotations

import json
from typing import Any, Optional

from lbtune.host.fs import HostFS

MANIFEST = "lbtune-capture.json"


def read_manifest(fs: HostFS) -> Optional[dict[str, Any]]:
    """The manifest of an unpacked capture, None when the tree is not an lbtune capture."""
    text = fs.read("/" + MANIFEST)  # bounded, never blocks on a FIFO
    if text is None:
        return None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return data if isinstance(data, dict) else None
