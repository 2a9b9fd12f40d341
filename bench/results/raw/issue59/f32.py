"""Do llama.cpp's Q8_0 activations explain the Gemma 3 tuning disagreement? Each file also as F32
(its Q4_0/Q8_0 weights dequantized exactly), so the matmuls run without activation quantization."""
import sys, tempfile
from pathlib import Path
from awq2gguf.builds import get_build
from awq2gguf.bench import perplexity
from awq2gguf.assets.dev_models import f16_gguf
b = get_build("patched")
d = Path("/work/main/models/anchors59/gemma3-permuted")
files = [d / f for f in sys.argv[1:]]
text = Path("/work/shared/data/wikitext-2-raw-test.txt")
with tempfile.TemporaryDirectory(dir="/work/exp60") as tmp:
    base = Path(tmp) / "base.kld"
    perplexity.on_text(b, f16_gguf("gemma3-permuted"), text, 512, 20, 2, save_logits=base)
    for f in files:
        f32 = Path(tmp) / "f32.gguf"
        b.run("llama-quantize", ["--allow-requantize", str(f), str(f32), "F32"])
        for label, m in (("as is", f), ("F32", f32)):
            r = perplexity.against_base(b, m, base, 2)
            print(f.name, label, r["kld"], r["ppl"], flush=True)
