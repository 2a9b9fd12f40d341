"""stock IQ4_NL --pure + imatrix on each twin (the all-Q4_0 file's size), same calibration (16 x 256) as the anchors."""
import json, sys, tempfile, time
from pathlib import Path
from awq2gguf.assets.dev_models import DEV_MODELS, f16_gguf
from awq2gguf.builds import get_build
from awq2gguf.bench import perplexity
from awq2gguf.llama_quantize import quantize
from awq2gguf.paths import MODELS_DIR
text = Path("/work/shared/data/wikitext-2-raw-test.txt")
b, stock = get_build("patched"), get_build("stock")
res = {}
for name in sys.argv[1].split(","):
    d = MODELS_DIR / "anchors59" / name
    f16 = f16_gguf(name)
    t0 = time.monotonic()
    b.run("llama-imatrix", ["-m", str(f16), "-f", str(d / "calibration.txt"), "-c", "256", "--chunks", "16", "-o", str(d / "imatrix.gguf"), "-t", "2"])
    out = quantize(stock, f16, d / "imatrix-IQ4_NL--pure.gguf", "IQ4_NL", extra_args=("--imatrix", str(d / "imatrix.gguf"), "--pure"))
    sec = time.monotonic() - t0
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp) / "b.kld"
        fp = perplexity.on_text(b, f16, text, 512, 20, 2, save_logits=base)["ppl"]
        r = perplexity.against_base(b, out, base, 2)
    res[name] = dict(method="stock IQ4_NL --pure + imatrix", size_mib=out.stat().st_size / 2**20, make_s=sec, fp16_ppl=fp, **r)
    print(name, res[name], flush=True)
    Path("/work/exp59/pure.json").write_text(json.dumps(res, indent=1))
