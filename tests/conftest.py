import codecs
import io
import json
import subprocess
import sys
import this
from contextlib import ExitStack, contextmanager
from pathlib import Path

import numpy as np
import openai
import pytest

from awq2gguf.bench.models import quantized_by
from awq2gguf.builds import BUILD_NAMES, BuildMissing, get_build
from awq2gguf.assets.dev_models import f16_gguf
from awq2gguf.llama_quantize import quantize
from awq2gguf.processes import LOOPBACK, run_tool, spawned, wait_until_ready
from awq2gguf.serve.process import free_port
from awq2gguf.assets.synthetic import SHAPES, write_synthetic_gguf
from awq2gguf.assets.synthetic_hf import write_synthetic_hf

REPO = Path(__file__).resolve().parents[1]
SERVE_KEY = "test-key-7f3a"  # the API key of the keyed test servers


def openai_client(url, key="none") -> openai.OpenAI:
    """The official client on an awq2gguf-serve, no retries."""
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=300)


@pytest.fixture(scope="session", params=BUILD_NAMES)
def build(request):
    try:
        return get_build(request.param)
    except BuildMissing as e:
        pytest.fail(str(e))


@pytest.fixture(scope="session")
def builds():
    try:
        return {n: get_build(n) for n in BUILD_NAMES}
    except BuildMissing as e:
        pytest.fail(str(e))


@pytest.fixture(scope="session")
def smollm2_q4_0(builds):
    """SmolLM2-135M-Instruct (tied embeddings) in all-Q4_0, one file for both builds."""
    return quantized_by(builds["patched"], f16_gguf("smollm2"), "Q4_0")


@pytest.fixture(scope="session")
def tiny_f16(tmp_path_factory):
    """F16 synthetic models, tied and untied, written once per session."""
    out = tmp_path_factory.mktemp("synthetic")
    return {name: write_synthetic_gguf(SHAPES[name], out / f"{name}-f16.gguf")
            for name in ("tiny-tied", "tiny-untied")}


@pytest.fixture(scope="session")
def tiny_q4_0(tiny_f16, builds, tmp_path_factory):
    """Each tiny model quantized to Q4_0 by each build: {(shape, build): path}."""
    out = tmp_path_factory.mktemp("q4_0")
    return {(shape, b): quantize(builds[b], src, out / f"{shape}-{b}.gguf", "Q4_0")
            for shape, src in tiny_f16.items() for b in builds}


@pytest.fixture(scope="session")
def tiny_hf(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    made = {}

    def make(arch: str, shape: str):
        if (arch, shape) not in made:
            made[arch, shape] = write_synthetic_hf(SHAPES[shape], root / f"{arch}-{shape}", arch)
        return made[arch, shape]
    return make


@pytest.fixture(scope="session")
def calib_text(tmp_path_factory):
    path = tmp_path_factory.mktemp("calib") / "zen.txt"
    path.write_text((codecs.decode(this.s, "rot13") + "\n\n") * 8)
    return path


def run_kernel_test(build, name: str, *args: str) -> str:
    """What the build's copy of a kernel test (tests/kernels, built into its bin/ by
    native/CMakeLists.txt with the tree's own flags) prints."""
    return run_tool([str(build.tool(name)), *args], name).stdout


def generate(build, model: Path, n: int = 8) -> subprocess.CompletedProcess:
    """Greedy generation of n tokens with the build's llama-completion."""
    return subprocess.run(
        [str(build.tool("llama-completion")), "-m", str(model), "-p", "The quick brown fox", "-n", str(n),
         "--ignore-eos", "-no-cnv", "--temp", "0", "-c", "128", "-t", "2", "--seed", "1"],
        env=build.env(), capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=300)


def llama_cpp_logits(build, model, tokens):
    """Logits for every position of tokens, from llama-cpp-python on the build's libllama.so."""
    code = ("import sys, json, numpy as np; from llama_cpp import Llama; "
            "llm = Llama(model_path=sys.argv[1], n_ctx=64, logits_all=True, verbose=False); "
            "llm.eval(json.loads(sys.argv[2])); np.save(sys.stdout.buffer, np.array(llm.scores[:llm.n_tokens]))")
    proc = subprocess.run([sys.executable, "-c", code, str(model), json.dumps(tokens)], env=build.env(),
                          capture_output=True, check=True)
    return np.load(io.BytesIO(proc.stdout))


def f16_rounded_model(model_dir):
    """The checkpoint as every awq2gguf job starts from it: FP32 weights rounded to F16."""
    import torch
    from transformers import AutoModelForCausalLM

    from awq2gguf.streamed import round_to_f16

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(round_to_f16(p))
    return model


@pytest.fixture
def two_rpc_servers(builds):
    """Two of the patched build's ggml-rpc-servers on loopback, one thread each: (HOST:PORTs, processes)."""
    with rpc_servers(builds["patched"], 2) as servers:
        yield servers


@contextmanager
def rpc_servers(build, count: int, env: dict[str, str] | None = None):
    """`count` of the build's ggml-rpc-servers on loopback, one thread each, `env` added to theirs."""
    ports = [free_port() for _ in range(count)]
    with ExitStack() as stack:
        children = [stack.enter_context(spawned([str(build.tool("ggml-rpc-server")), "-H", LOOPBACK, "-p", str(p),
                                                 "-t", "1"], env={**build.env(), **(env or {})}, keep_lines=0, grace=0))
                    for p in ports]
        for child, p in zip(children, ports):
            wait_until_ready(child, "ggml-rpc-server", 30, port=p)
        yield [f"{LOOPBACK}:{p}" for p in ports], [c.process for c in children]
