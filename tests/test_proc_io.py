"""proc_io: outputs that appear only when complete, and tool failures that say what failed and why."""

import sys

import pytest

import time

import click
from click.testing import CliRunner

from awq2gguf.proc_io import Awq2ggufError, Command, ToolFailed, atomic_path, run_tool, stream_tool


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


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_a_streamed_tool_hands_over_each_line_as_it_prints_it():
    lines = []
    stream_tool(_python("import sys, time\nfor i in range(3): print(i, flush=True); time.sleep(0.05)"), "counting",
                lambda line: lines.append((line.strip(), time.monotonic())))
    assert [n for n, _ in lines] == ["0", "1", "2"]
    assert lines[-1][1] - lines[0][1] > 0.08  # as they came, not all at the end


def test_a_failed_streamed_tool_raises_the_callers_error_with_its_stderr():
    class Mine(Awq2ggufError):
        pass
    with pytest.raises(Mine, match=r"(?s)counting failed \(3\):\nwent wrong$"):
        stream_tool(_python("import sys; print(1); sys.stderr.write('went wrong'); sys.exit(3)"), "counting",
                    lambda line: None, error=Mine)


def test_a_streamed_tool_past_its_timeout_is_stopped():
    start = time.monotonic()
    with pytest.raises(ToolFailed, match="sleeping ran past 1 s and was stopped"):
        stream_tool(_python("import time; time.sleep(30)"), "sleeping", lambda line: None, timeout=1)
    assert time.monotonic() - start < 10


def test_a_streamed_tool_is_killed_when_its_reader_gives_up():
    def give_up(line):
        raise KeyboardInterrupt
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        stream_tool(_python("import time\nwhile True: print(1, flush=True); time.sleep(0.01)"), "talking", give_up)
    assert time.monotonic() - start < 10


def test_a_command_turns_the_toolkits_errors_into_one_line():
    @click.command(cls=Command)
    def failing():
        raise ToolFailed("llama-quantize failed (1):\nout of disk")
    result = CliRunner().invoke(failing)
    assert result.exit_code == 1
    assert result.output == "Error: llama-quantize failed (1):\nout of disk\n"
    assert result.exc_info[0] is SystemExit  # no traceback


def test_a_stop_that_lands_while_a_class_is_made_is_still_the_stop():
    """SIGTERM's handler raises SystemExit(143) wherever the job is; inside an import, Python wraps an
    exception from a class attribute's __set_name__ in a RuntimeError (seen once in CI's SIGTERM test)."""
    class Stopped:
        def __set_name__(self, owner, name):
            raise SystemExit(143)

    @click.command(cls=Command)
    def importing():
        type("Made", (), {"field": Stopped()})
    result = CliRunner().invoke(importing)
    assert result.exit_code == 143 and result.output == ""
