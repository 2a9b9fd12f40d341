"""awq2gguf variants on given dev models (usually twins), evaluated against the model's FP16 (20 x 512).
usage: variants.py NAMES LABEL=ARGS... (ARGS space-separated; {calib} -> the model's anchors calibration file)"""
import json, sys, time, tempfile
from pathlib import Path
from awq2gguf.assets.dev_models import DEV_MODELS, f16_gguf, hf_folder
from awq2gguf.builds import get_build
from awq2gguf.bench import perplexity
from awq2gguf.bench.awq import calibration_file, awq2gguf, Made
from awq2gguf.bench import autoround
from awq2gguf.paths import MODELS_DIR

text = Path("/work/shared/data/wikitext-2-raw-test.txt")
names = sys.argv[1].split(",")
variants = [v.split("=", 1) for v in sys.argv[2:]]
build = get_build("patched")
tag = time.strftime("%H%M%S")
out_all = {}
for name in names:
    model_dir, f16 = hf_folder(name), f16_gguf(name)
    out_dir = MODELS_DIR / "anchors61" / name
    out_dir.mkdir(parents=True, exist_ok=True)
    calibs = {}
    def calib(n):
        if n not in calibs:
            calibs[n] = calibration_file(model_dir, text, n, 256, out_dir / f"calibration-{n}.txt")
        return calibs[n]
    made = []
    for label, args in variants:
        args = args.split()
        n = int(args[args.index("--calib-samples") + 1]) if "--calib-samples" in args else 16
        args = [calib(n) if a == "{calib}" else a for a in args]
        fname = label.replace(" ", "_").replace("/", "_") + ".gguf"
        if args[0].startswith("autoround:"):
            iters = int(args[0].split(":")[1])
            jsonl = autoround.calibration_jsonl(model_dir, text, n, 256, out_dir / f"calibration-{n}.jsonl")
            sec, peak = autoround.quantize_q4_0(model_dir, jsonl, n, 256, iters, out_dir / fname, 2)
            made.append(Made(label + f" ({autoround.not_q4_0(out_dir / fname)})", out_dir / fname, sec, peak))
            print(name, label, f"{sec:.0f} s", flush=True)
            continue
        made.append(awq2gguf(label, model_dir, out_dir / fname, [str(a) for a in args] + ["--threads", "2"], build))
        print(name, label, f"{made[-1].seconds:.0f} s", f"{made[-1].peak_rss/2**30:.2f} GiB", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "base.kld"
        fp16 = perplexity.on_text(build, f16, text, 512, 20, 2, save_logits=base)["ppl"]
        rows = []
        for mm in made:
            r = perplexity.against_base(build, mm.path, base, 2)
            rows.append(dict(method=mm.label, size_mib=mm.path.stat().st_size / 2**20, make_s=mm.seconds,
                             peak_gib=mm.peak_rss / 2**30, stages=mm.stages, **r))
            print(name, {k: v for k, v in rows[-1].items() if k != "stages"}, flush=True)
    out_all[name] = dict(reference=DEV_MODELS[name].reference, fp16_ppl=fp16, rows=rows)
    Path(f"/work/exp61/variants-{tag}.json").write_text(json.dumps(out_all, indent=1))
