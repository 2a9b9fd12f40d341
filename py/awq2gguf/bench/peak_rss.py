"""Peak use of the machine by a job: a command's own peak RSS, and the disk a folder takes.

ru_maxrss of a child spawned from this process is useless: exec keeps the larger of the old and
new address spaces' high-water marks, and the old one is ours (hundreds of MB once numpy has held
a model). So a fresh, small launcher forks and execs the command and reports the grandchild's
rusage, as GNU time does; its floor is the launcher's own RSS.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path

from ..processes import PR_SET_PDEATHSIG, run

_LAUNCHER = f"""
import ctypes, os, sys
pid = os.fork()
if pid == 0:
    ctypes.CDLL(None).prctl({PR_SET_PDEATHSIG}, {signal.SIGKILL.value})  # SIGKILL when the launcher dies (timeout, Ctrl-C)
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
        proc = run([sys.executable, "-S", "-c", _LAUNCHER, report.name, *cmd], env, timeout)
        peak = int(report.read() or 0)
    return subprocess.CompletedProcess(cmd, proc.returncode, proc.stdout, proc.stderr), peak


def _folder_bytes(folder: Path) -> int:
    total = 0
    for root, _dirs, files in os.walk(folder):
        for f in files:
            try:
                total += os.stat(os.path.join(root, f)).st_size
            except FileNotFoundError:  # removed while we looked
                pass
    return total


@contextmanager
def peak_disk(folder: Path, interval: float = 0.5):
    """Yield a callable giving the largest total size of the files under folder, sampled every
    `interval` seconds while the block runs (and once at its end)."""
    peak, done = [0], threading.Event()

    def watch():
        while True:
            peak[0] = max(peak[0], _folder_bytes(folder))
            if done.wait(interval):
                return

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield lambda: peak[0]
    finally:
        done.set()
        thread.join()
        peak[0] = max(peak[0], _folder_bytes(folder))
