"""scripts/mix-gguf-tensors.py: the matching tensors from the first file, the others from the second."""

import subprocess
import sys
from pathlib import Path

import numpy as np
from gguf import GGUFReader, GGUFWriter

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "mix-gguf-tensors.py"
NAMES = ("blk.0.ffn_up.weight", "blk.1.ffn_up.weight", "output.weight")


def _write(path: Path, value: float, names=NAMES) -> None:
    w = GGUFWriter(str(path), "llama")
    w.add_string("general.name", path.stem)
    for n, name in enumerate(names):
        w.add_tensor(name, np.full((4, 32), value + n, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def _mix(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True, text=True)


def test_matching_tensors_come_from_the_first_file(tmp_path):
    a, b, out = tmp_path / "a.gguf", tmp_path / "b.gguf", tmp_path / "out.gguf"
    _write(a, 10.0)
    _write(b, 20.0)
    assert _mix(a, b, out, r"blk\.1\..*", "output.*").returncode == 0
    got = {t.name: float(np.asarray(t.data).flat[0]) for t in GGUFReader(out).tensors}
    assert got == {"blk.0.ffn_up.weight": 20.0, "blk.1.ffn_up.weight": 11.0, "output.weight": 12.0}
    assert str(bytes(GGUFReader(out).fields["general.name"].parts[-1]), "utf-8") == "a"


def test_a_tensor_missing_from_the_second_file_is_an_error_and_nothing_is_written(tmp_path):
    a, b, out = tmp_path / "a.gguf", tmp_path / "b.gguf", tmp_path / "out.gguf"
    _write(a, 10.0)
    _write(b, 20.0, NAMES[:2])
    run = _mix(a, b, out, r"blk\.1\..*")
    assert run.returncode != 0 and "has no tensor output.weight" in run.stderr
    assert not out.exists() and not Path(f"{out}.tmp").exists()


def test_an_input_that_is_not_a_gguf_is_a_one_line_error(tmp_path):
    a, b, out = tmp_path / "a.gguf", tmp_path / "b.txt", tmp_path / "out.gguf"
    _write(a, 10.0)
    b.write_text("not a model")
    run = _mix(a, b, out, "output.*")
    assert run.returncode != 0 and run.stderr.startswith(f"{b}: not a readable GGUF file")
    assert len(run.stderr.strip().splitlines()) == 1 and not out.exists()
