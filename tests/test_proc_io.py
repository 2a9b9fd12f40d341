"""proc_io: outputs that appear only when complete, and tool failures that say what failed and why."""

import sys

import pytest

from awq2gguf.proc_io import Awq2ggufError, ToolFailed, atomic_path, run_tool


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


class Custom(Awq2ggufError):
    pass


def test_a_failed_tool_raises_the_callers_error_with_what_it_said_last():
    lines = "; ".join(f"print('line {i}', file=sys.stderr)" for i in range(30))
    with pytest.raises(Custom) as e:
        run_tool([sys.executable, "-c", f"import sys; {lines}; sys.exit(3)"], "the probe", error=Custom)
    message = str(e.value)
    assert message.startswith("the probe failed (3):\n")
    assert "line 29" in message and "line 17" not in message  # the tail, not the whole log
    with pytest.raises(ToolFailed, match="the probe failed"):
        run_tool([sys.executable, "-c", "raise SystemExit(1)"], "the probe")
    assert run_tool([sys.executable, "-c", "print('ok')"], "the probe").stdout == "ok\n"
