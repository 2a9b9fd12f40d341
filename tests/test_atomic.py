"""Outputs that appear only when complete."""

import pytest

from awq2gguf.atomic import atomic_path


@pytest.mark.parametrize("kind", ["file", "folder"])
def test_an_atomic_output_replaces_the_old_one_only_when_complete(tmp_path, kind):
    dst = tmp_path / "out"

    def write(path, text):
        if kind == "file":
            path.write_text(text)
        else:
            path.mkdir()
            (path / "part").write_text(text)

    def read():
        return dst.read_text() if kind == "file" else (dst / "part").read_text()

    with atomic_path(dst) as tmp:
        write(tmp, "old")
        assert not dst.exists()
    assert read() == "old"

    with pytest.raises(KeyboardInterrupt):
        with atomic_path(dst) as tmp:
            write(tmp, "half")
            raise KeyboardInterrupt
    assert read() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no temporary left behind

    with atomic_path(dst) as tmp:
        write(tmp, "new")
    assert read() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
