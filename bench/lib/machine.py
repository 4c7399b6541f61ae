"""The machine a benchmark ran on, recorded inside its results (never in the file's name)."""

from __future__ import annotations

import os
import platform
from importlib import metadata


def machine() -> dict[str, object]:
    """The CPU, core count, Python and the versions of the inference libraries present."""
    cpu = "unknown"
    with open("/proc/cpuinfo") as info:
        for line in info:
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    versions = {}
    for package in ("numpy", "torch", "transformers", "llama_cpp_python"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            continue
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        **versions,
        "load_average_start": os.getloadavg(),
    }
