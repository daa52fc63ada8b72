"""Where lbtune's own shipped data lives: wheel package data, or the source checkout.

pyproject.toml force-includes top-level directories (`profiles/`, `probes/`) into the wheel
as `lbtune/_data/<name>`; an editable install or a checkout reads them from the source tree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import lbtune


def shipped_dir(name: str) -> Optional[Path]:
    """`lbtune/_data/<name>` in a wheel, else `<checkout>/<name>`; None when neither exists."""
    pkg = Path(lbtune.__file__).resolve().parent
    wheel = pkg / "_data" / name
    if wheel.is_dir():
        return wheel
    source = pkg.parent / name
    if source.is_dir() and (pkg.parent / "pyproject.toml").is_file():
        return source
    return None
