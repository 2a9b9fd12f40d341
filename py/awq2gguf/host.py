"""What this machine offers the toolkit: physical cores (the default thread count) and memory."""

from __future__ import annotations

import os

import psutil


def physical_cores() -> int:
    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def available_memory() -> int:
    """Bytes a new allocation can take without swapping (the kernel's MemAvailable)."""
    return psutil.virtual_memory().available
