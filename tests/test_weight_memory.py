"""Patches 0003 and 0004: a tied embedding is held once, and weights copied out of the file
mapping (repacked Q4_0) do not stay resident as file pages too. Sizes here are structural (which
buffer holds what, which pages are mapped in), not speed or memory goals: those are in bench."""

import json
import os
import re
import subprocess
import sys

import pytest
from gguf import GGUFReader

PROMPT = "The quick brown fox"


def model_buffers(build, model, load_mode):
    """{buffer type: MiB} of the model weights, from llama-completion's load log."""
    proc = subprocess.run([str(build.tool("llama-completion")), "-m", str(model), "-p", "hi", "-n", "1", "-no-cnv",
                           "-t", "2", "-lm", load_mode, "-v"], env=build.env(), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    sizes = re.findall(r"load_tensors:\s+(\S+) model buffer size =\s+([\d.]+) MiB", proc.stderr)
    return {name: float(mib) for name, mib in sizes}  # the last report of each type is the real one


def test_tied_embedding_is_not_kept_as_a_second_plain_copy(builds, smollm2_q4_0):
    token_embd = next(t for t in GGUFReader(smollm2_q4_0).tensors if t.name == "token_embd.weight")
    token_embd_mib = int(token_embd.n_bytes) / 2**20
    stock, patched = (model_buffers(builds[b], smollm2_q4_0, "none") for b in ("stock", "patched"))
    assert stock["CPU_REPACK"] == patched["CPU_REPACK"]  # the repacked output matrix, in both
    assert stock["CPU"] == pytest.approx(token_embd_mib, abs=0.5)  # plus a plain copy for row lookup
    assert patched["CPU"] < 0.5  # norms only


def read_cold(model):
    """Evict the file from the page cache and read it back, as a model file is first read from disk:
    readahead then caches it in large folios, which the kernel may map 2 MiB at a time."""
    with open(model, "rb") as f:
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
        while f.read(1 << 24):
            pass


def resident_model_pages(build, model):
    """(KiB of the model file's mapping that are resident after loading and generating, text)."""
    read_cold(model)
    code = ("import sys, json; from llama_cpp import Llama; "
            "llm = Llama(model_path=sys.argv[1], n_ctx=128, n_threads=2, verbose=False); "
            f"text = llm({PROMPT!r}, max_tokens=8, temperature=0)['choices'][0]['text']; "
            "rss, inside = 0, False\n"
            "for line in open('/proc/self/smaps'):\n"
            "    if line[0] in '0123456789abcdef' and '-' in line.split()[0]: inside = line.rstrip().endswith(sys.argv[1])\n"
            "    elif inside and line.startswith('Rss:'): rss += int(line.split()[1])\n"
            "print(json.dumps([rss, text]))")
    proc = subprocess.run([sys.executable, "-c", code, str(model)], env=build.env(), capture_output=True, text=True,
                          check=True, timeout=300)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_repacked_weights_do_not_stay_resident_as_file_pages(builds, smollm2_q4_0):
    file_kib = smollm2_q4_0.stat().st_size / 1024
    (stock_rss, stock_text), (patched_rss, patched_text) = (resident_model_pages(builds[b], smollm2_q4_0)
                                                            for b in ("stock", "patched"))
    assert stock_rss > 0.9 * file_kib  # stock: the whole file stays mapped in beside the repacked copy
    assert patched_rss < 0.05 * file_kib  # patched: only pages around the mmap-backed norms
    assert patched_text == stock_text and len(patched_text) > 8
