"""Issue 72, first slice: awq2gguf --qtype on llama.cpp's mixtures (scales searched on each matrix's own
grid, imatrix of the search) against stock llama-quantize of the same type with and without llama-imatrix,
on the off-grid twins. Same calibration for all (16 x 256 from the text's second half), KLD to the twin's
FP16 over 20 x 512 WikiText-2 windows (patched build runs every file). With --best: 128 x 256 calibration
(llama-imatrix reads all of it) and awq2gguf --quality best (block-wise tuning through each matrix's grid).
usage: qtypes.py NAMES [QTYPES] [--best]   e.g. qtypes.py smollm2-permuted Q4_K_M,IQ4_XS --best"""
import json, sys, tempfile, time
from pathlib import Path
from awq2gguf.assets.dev_models import f16_gguf, hf_folder
from awq2gguf.builds import get_build
from awq2gguf.bench import perplexity
from awq2gguf.bench.awq import calibration_file, awq2gguf, Made
from awq2gguf.llama_quantize import quantize
from awq2gguf.paths import MODELS_DIR, DEFAULT_EVAL_TEXT

best = "--best" in sys.argv
args = [a for a in sys.argv[1:] if a != "--best"]
names = args[0].split(",")
qtypes = args[1].split(",") if len(args) > 1 else ["Q4_K_M", "IQ4_XS"]
N, T, threads = 128 if best else 16, 256, 2
tag = "-best" if best else ""
build, stock = get_build("patched"), get_build("stock")
results = {}
for name in names:
    model_dir, f16 = hf_folder(name), f16_gguf(name)
    out_dir = MODELS_DIR / "issue72" / (name + tag)
    out_dir.mkdir(parents=True, exist_ok=True)
    calib = calibration_file(model_dir, DEFAULT_EVAL_TEXT, N, T, out_dir / "calibration.txt")
    t0 = time.monotonic()
    matrix = out_dir / "imatrix.gguf"
    build.run("llama-imatrix", ["-m", str(f16), "-f", str(calib), "-c", str(T), "--chunks", str(N), "-o", str(matrix),
                                "-t", str(threads)])
    shared = time.monotonic() - t0
    made = []
    for q in qtypes:
        t0 = time.monotonic()
        made.append(Made(f"stock {q}", quantize(stock, f16, out_dir / f"stock-{q}.gguf", q), time.monotonic() - t0))
        t0 = time.monotonic()
        made.append(Made(f"stock {q} + imatrix", quantize(stock, f16, out_dir / f"stock-{q}-imatrix.gguf", q,
                                                          extra_args=("--imatrix", str(matrix))),
                         shared + time.monotonic() - t0))
        how = ["--quality", "best"] if best else ["--calib-samples", str(N)]
        made.append(awq2gguf(f"awq2gguf --qtype {q}" + (" --quality best" if best else ""), model_dir,
                             out_dir / f"awq2gguf-{q}.gguf", ["--qtype", q, "--calib", str(calib), *how,
                                                              "--calib-tokens", str(T), "--threads", str(threads)], build))
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base.kld"
        fp16 = perplexity.on_text(build, f16, DEFAULT_EVAL_TEXT, 512, 20, threads, save_logits=base)["ppl"]
        rows = []
        for m in made:
            r = perplexity.against_base(build, m.path, base, threads)
            rows.append(dict(method=m.label, size_mib=m.path.stat().st_size / 2**20, make_s=m.seconds, **r))
            print(name, rows[-1], flush=True)
    results[name] = dict(fp16_ppl=fp16, rows=rows)
    Path(__file__).with_name(f"qtypes{tag}-{'_'.join(names)}-{time.strftime('%Y%m%d')}.json").write_text(
        json.dumps(results, indent=1))
