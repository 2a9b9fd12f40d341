"""K-quant anchors on each development model and its off-grid twin: plain, imatrix Q4_0, stock IQ4_NL/Q4_K_M
+ imatrix, and (twins only, or --awq) awq2gguf with the calibration file. Same calibration windows for all."""
import json, sys, time, tempfile
from pathlib import Path
from awq2gguf.assets.dev_models import DEV_MODELS, f16_gguf, hf_folder
from awq2gguf.builds import get_build
from awq2gguf.bench import perplexity
from awq2gguf.bench.awq import calibration_file, imatrix_variants, awq2gguf, Made
from awq2gguf.bench.models import quantized_by
from awq2gguf.paths import MODELS_DIR

text = Path("/work/shared/data/wikitext-2-raw-test.txt")
names = sys.argv[1].split(",")
awq_args = sys.argv[2:]  # extra awq2gguf args; empty -> no awq2gguf row for non-twins
N, T, threads = 16, 256, 2
build = get_build("patched")
out_all = {}
for name in names:
    m = DEV_MODELS[name]
    t0 = time.time()
    model_dir, f16 = hf_folder(name), f16_gguf(name)
    out_dir = MODELS_DIR / "anchors59" / name
    out_dir.mkdir(parents=True, exist_ok=True)
    calib = calibration_file(model_dir, text, N, T, out_dir / "calibration.txt")
    made = [Made("all-Q4_0 (plain)", quantized_by(build, f16, "Q4_0", print))]
    made += imatrix_variants(build, f16, calib, N, T, out_dir, threads)
    if m.twin_of or awq_args:
        made.append(awq2gguf("awq2gguf, calibration file", model_dir, out_dir / "awq2gguf-file-Q4_0.gguf",
                             ["--calib", str(calib), "--calib-samples", str(N), "--calib-tokens", str(T), "--threads", str(threads)], build))
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base.kld"
        fp16 = perplexity.on_text(build, f16, text, 512, 20, threads, save_logits=base)["ppl"]
        rows = []
        for mm in made:
            r = perplexity.against_base(build, mm.path, base, threads)
            rows.append(dict(method=mm.label, size_mib=mm.path.stat().st_size / 2**20, make_s=mm.seconds, **r))
            print(name, rows[-1], flush=True)
    out_all[name] = dict(reference=m.reference, fp16_ppl=fp16, rows=rows, seconds=time.time() - t0)
    Path(f"/work/exp59/anchors-{'_'.join(names)}.json").write_text(json.dumps(out_all, indent=1))
