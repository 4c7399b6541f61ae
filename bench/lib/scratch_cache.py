"""A fresh spec-decode cache root that shares the user's built kernels and assembled models, so a
benchmark sees a model's first load (nothing checked or calibrated yet) without rebuilding."""

from __future__ import annotations

import tempfile
from pathlib import Path


def scratch_cache(prefix: str) -> Path:
    """A new temporary cache root whose ``kernels`` and ``models`` link to the user's."""
    from spec_decode.backends.cache import cache_root

    root = Path(tempfile.mkdtemp(prefix=prefix))
    for name in ("kernels", "models"):
        (root / name).symlink_to(cache_root() / name)
    return root
