"""The pin and the patch series: hash check, `git am -3` application, generated patches."""

import shutil
import subprocess

from conftest import REPO


def run(cmd, cwd=None, check=False):
    return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, check=check)


def copy_script(tmp_path, name):
    (tmp_path / "scripts").mkdir(exist_ok=True)
    shutil.copy(REPO / "scripts" / name, tmp_path / "scripts" / name)
    return tmp_path / "scripts" / name


def test_wrong_pinned_hash_stops_vendor(tmp_path):
    script = copy_script(tmp_path, "vendor.sh")
    (tmp_path / "vendor").mkdir()
    pin = (REPO / "vendor" / "pin.env").read_text()
    good = next(l.split("=")[1] for l in pin.splitlines() if l.startswith("LLAMA_CPP_PYTHON_SDIST_SHA256="))
    (tmp_path / "vendor" / "pin.env").write_text(pin.replace(good, "0" * 64))
    (tmp_path / "vendor" / ".cache").symlink_to(REPO / "vendor" / ".cache")
    proc = run(["bash", str(script)])
    assert proc.returncode != 0
    assert "sha256 mismatch" in proc.stderr and good in proc.stderr and "0" * 64 in proc.stderr
    assert not (tmp_path / "vendor" / "llama.cpp").exists()


def make_fake_vendor(tmp_path):
    """A tiny stand-in for vendor/llama.cpp: branch `base` with one file."""
    src = tmp_path / "vendor" / "llama.cpp"
    src.mkdir(parents=True)
    git = lambda *a: run(["git", "-C", str(src), "-c", "user.name=t", "-c", "user.email=t@t", *a], check=True)
    git("init", "-q", "-b", "base")
    git("config", "user.name", "t")
    git("config", "user.email", "t@t")
    (src / "a.txt").write_text("one\ntwo\nthree\n")
    git("add", "a.txt")
    git("commit", "-q", "-m", "base")
    return src, git


def test_broken_patch_stops_and_names_the_patch(tmp_path):
    script = copy_script(tmp_path, "apply-patches.sh")
    src, git = make_fake_vendor(tmp_path)
    patches = tmp_path / "patches"
    patches.mkdir()
    git("checkout", "-q", "-b", "work")
    (src / "a.txt").write_text("one\nTWO\nthree\n")
    git("commit", "-q", "-am", "good change")
    run(["git", "-C", str(src), "format-patch", "-q", "--zero-commit", "-o", str(patches), "base..work"], check=True)
    good = (patches / "0001-good-change.patch").read_text()
    (patches / "0002-broken.patch").write_text(
        good.replace("good change", "broken change").replace("-two\n+TWO", "-no such line\n+X"))
    git("checkout", "-q", "base")

    proc = run(["bash", str(script)])
    assert proc.returncode != 0
    assert "patches/0002-broken.patch does not apply" in proc.stderr
    assert "git am -3" in proc.stderr and "make patches-export" in proc.stderr
    # The good patch is in, the broken one left no half-applied state behind.
    assert (src / "a.txt").read_text() == "one\nTWO\nthree\n"
    assert not (src / ".git" / "rebase-apply").exists()

    (patches / "0002-broken.patch").unlink()
    assert run(["bash", str(script)]).returncode == 0
    again = run(["bash", str(script)])
    assert again.returncode == 0 and "up to date" in again.stdout

    (src / "a.txt").write_text("dirty\n")
    dirty = run(["bash", str(script)])
    assert dirty.returncode != 0 and "uncommitted changes" in dirty.stderr


def test_patch_series_is_exactly_what_format_patch_produces(tmp_path):
    """patches/ is generated from vendor/llama.cpp's commits, byte for byte, never hand-edited."""
    proc = run(["bash", str(REPO / "scripts" / "export-patches.sh"), str(tmp_path)])
    assert proc.returncode == 0, proc.stderr
    committed = sorted(p.name for p in (REPO / "patches").glob("*.patch"))
    assert committed and sorted(p.name for p in tmp_path.glob("*.patch")) == committed
    for name in committed:
        assert (tmp_path / name).read_bytes() == (REPO / "patches" / name).read_bytes(), name
