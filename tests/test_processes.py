"""Child processes: tool failures that say what failed and why, and servers started, waited on and
stopped."""

import subprocess
import sys
import time

import psutil
import pytest

from awq2gguf.errors import Awq2ggufError, ToolFailed
from awq2gguf.processes import LOOPBACK, run_tool, spawned, stream_tool, wait_until_ready
from awq2gguf.serve.process import free_port


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


def _python(code: str, *args: str) -> list[str]:
    return [sys.executable, "-c", code, *args]


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


@pytest.mark.parametrize("keep_lines, kept", [(None, "0\n1\n2\n3\n"), (2, "2\n3\n"), (0, "")])
def test_a_child_keeps_its_whole_output_its_last_lines_or_none(keep_lines, kept):
    with spawned(_python("import sys\nfor i in range(4): print(i, file=sys.stderr if i % 2 else sys.stdout, flush=True)"),
                 keep_lines=keep_lines) as child:
        child.process.wait()
        assert child.output() == kept


def test_a_child_that_ignores_sigterm_is_killed_after_its_grace():
    code = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('ready', flush=True); time.sleep(60)"
    with spawned(_python(code), keep_lines=1, grace=1) as child:
        while child.output() != "ready\n":
            time.sleep(0.05)
        start = time.monotonic()
    assert child.process.returncode == -9
    assert 1 <= time.monotonic() - start < 10


@pytest.mark.parametrize("dies", [True, False], ids=["die_with_parent", "outlives"])
def test_a_child_dies_with_its_parent_even_by_sigkill(dies):
    parent = subprocess.Popen(_python(
        "import sys, time\nfrom awq2gguf.processes import spawned\n"
        "with spawned([sys.executable, '-c', 'import time; time.sleep(60)'], die_with_parent=sys.argv[1] == '1') as c:\n"
        "    print(c.process.pid, flush=True); time.sleep(60)", str(int(dies))), stdout=subprocess.PIPE, text=True)
    child = psutil.Process(int(parent.stdout.readline()))
    parent.kill()
    parent.wait()
    try:
        deadline = time.monotonic() + 5 if dies else time.monotonic() + 1
        while child.is_running() and child.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (not child.is_running() or child.status() == psutil.STATUS_ZOMBIE) == dies
    finally:
        if not dies:
            child.kill()


def test_waiting_for_a_child_that_exits_reports_its_exit_and_last_words():
    with spawned(_python("print('no model here'); raise SystemExit(3)")) as child:
        start = time.monotonic()
        with pytest.raises(Custom) as e:
            wait_until_ready(child, "the server", 30, Custom, port=free_port())
    assert str(e.value) == "the server failed (3):\nno model here"
    assert time.monotonic() - start < 10  # at once, not at the timeout


_HTTP_SERVER = """
import http.server, sys, time
class Keyed(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.headers.get("Authorization") == "Bearer k" else 401)
        self.end_headers()
    def log_message(self, *args):
        pass
time.sleep(0.3)
http.server.HTTPServer((sys.argv[2], int(sys.argv[1])), Keyed).serve_forever()
"""


def test_waiting_for_a_child_returns_once_its_url_answers_200_or_its_port_takes_connections():
    port = free_port()
    with spawned(_python(_HTTP_SERVER, str(port), LOOPBACK)) as child:
        wait_until_ready(child, "the server", 30, url=f"http://{LOOPBACK}:{port}/", headers={"Authorization": "Bearer k"})
        with pytest.raises(Custom, match="^the server did not answer within 1 s$"):
            wait_until_ready(child, "the server", 1, Custom, url=f"http://{LOOPBACK}:{port}/")  # 401 without the key
        wait_until_ready(child, "the server", 30, port=port)
