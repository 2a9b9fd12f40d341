"""Run a command and measure its own peak RSS.

ru_maxrss of a child spawned from this process is useless: exec keeps the larger of the old and
new address spaces' high-water marks, and the old one is ours (hundreds of MB once numpy has held
a model). So a fresh, small launcher forks and execs the command and reports the grandchild's
rusage, as GNU time does; its floor is the launcher's own ~10 MB.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile

_LAUNCHER = """
import ctypes, os, sys
pid = os.fork()
if pid == 0:
    ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL: die with the launcher (timeout, Ctrl-C)
    os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    f.write(str(usage.ru_maxrss * 1024))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def run_with_peak_rss(cmd: list[str], env: dict[str, str] | None = None,
                      timeout: float | None = None) -> tuple[subprocess.CompletedProcess, int]:
    """(completed process with captured text output, peak RSS in bytes)."""
    with tempfile.NamedTemporaryFile("r") as report:
        proc = subprocess.run([sys.executable, "-S", "-c", _LAUNCHER, report.name, *cmd], env=env,
                              capture_output=True, text=True, errors="replace", timeout=timeout)
        peak = int(report.read() or 0)
    return subprocess.CompletedProcess(cmd, proc.returncode, proc.stdout, proc.stderr), peak
