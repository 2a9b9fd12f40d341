"""Patches 0004, 0005 and 0016: a tied embedding is held once, weights copied out of the file
mapping (repacked Q4_0) do not stay resident as file pages too, and their buffer asks for huge
pages. Sizes here are structural (which buffer holds what, which pages are mapped in), not speed
or memory goals: those are in bench."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

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


def pages_after_generating(build, model):
    """{"file_kib": KiB of the model file's mapping resident after loading and generating,
    "anon_huge_kib": KiB of anonymous memory on transparent huge pages, "text": the text}."""
    read_cold(model)
    code = ("import sys, json; from llama_cpp import Llama; "
            "llm = Llama(model_path=sys.argv[1], n_ctx=128, n_threads=2, verbose=False); "
            f"text = llm({PROMPT!r}, max_tokens=8, temperature=0)['choices'][0]['text']; "
            "rss, huge, inside = 0, 0, False\n"
            "for line in open('/proc/self/smaps'):\n"
            "    if line[0] in '0123456789abcdef' and '-' in line.split()[0]: inside = line.rstrip().endswith(sys.argv[1])\n"
            "    elif inside and line.startswith('Rss:'): rss += int(line.split()[1])\n"
            "    elif line.startswith('AnonHugePages:'): huge += int(line.split()[1])\n"
            "print(json.dumps({'file_kib': rss, 'anon_huge_kib': huge, 'text': text}))")
    proc = subprocess.run([sys.executable, "-c", code, str(model)], env=build.env(), capture_output=True, text=True,
                          check=True, timeout=300)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def pages(builds, smollm2_q4_0):
    """pages_after_generating for each build, measured once for the tests below."""
    return {b: pages_after_generating(builds[b], smollm2_q4_0) for b in ("stock", "patched")}


def test_repacked_weights_do_not_stay_resident_as_file_pages(pages, smollm2_q4_0):
    file_kib = smollm2_q4_0.stat().st_size / 1024
    stock, patched = pages["stock"], pages["patched"]
    assert stock["file_kib"] > 0.9 * file_kib  # stock: the whole file stays mapped in beside the repacked copy
    assert patched["file_kib"] < 0.05 * file_kib  # patched: only pages around the mmap-backed norms
    assert patched["text"] == stock["text"] and len(patched["text"]) > 8


def transparent_huge_pages():
    """The kernel's THP mode: always, madvise or never (None where the kernel has no THP)."""
    setting = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    return re.search(r"\[(\w+)\]", setting.read_text()).group(1) if setting.exists() else None


def test_repacked_weights_ask_for_huge_pages(builds, smollm2_q4_0, pages):
    mode = transparent_huge_pages()
    if mode in (None, "never"):
        pytest.skip(f"transparent huge pages are {mode or 'not built into this kernel'}: there is nothing to ask for")
    repacked_kib = model_buffers(builds["patched"], smollm2_q4_0, "none")["CPU_REPACK"] * 1024
    stock, patched = pages["stock"], pages["patched"]
    # Only the buffers' last partial 2 MiB stay on small pages.
    assert patched["anon_huge_kib"] > 0.8 * repacked_kib, patched
    if mode == "madvise":  # stock does not ask, so it gets none (with "always" every process gets them)
        assert stock["anon_huge_kib"] < 0.1 * repacked_kib, stock
    assert patched["text"] == stock["text"]
