"""llama-server, the engine behind awq2gguf-serve: the chosen build's own server as a child process on
a private loopback port, and the calls the API and the chat page make to it.

llama-server decodes the requests of its parallel slots together (continuous batching): one pass
over the weights serves every open answer, which on a CPU multiplies the tokens/s the machine gives.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import AsyncIterator, Callable, NamedTuple

import httpx
from gguf import GGUFReader, PoolingType

from ..builds import get_build
from ..errors import Awq2ggufError, tool_failure
from ..processes import LOOPBACK, spawned, wait_until_ready
from ..rpc import check_reachable
from .limits import OpenAIError
from .options import SPECULATION, ServeOptions
from .process import free_port

LOG_LINES = 40  # the engine's last log lines, quoted if it fails


class EngineFailed(Awq2ggufError):
    pass


def speculation_args(opts: ServeOptions) -> list[str]:
    """llama-server's options for --spec and --draft (both: the n-gram drafts first, the draft model
    where they find none)."""
    ngram = SPECULATION[opts.spec]
    types = [t for t in (ngram.spec_type, "draft-simple" if opts.draft else None) if t]
    if not types:
        return []
    draft = ["--model-draft", str(opts.draft), "--threads-draft", str(opts.threads),
             "--threads-batch-draft", str(opts.threads)] if opts.draft else []
    return ["--spec-type", ",".join(types), *ngram.args, *draft]


def _served_args(server: Path, opts: ServeOptions, port: int, key: str) -> list[str]:
    """What both engines take: the model under its name, a private port and key, the threads."""
    return [str(server), "--model", str(opts.model), "--alias", opts.name,
            "--host", LOOPBACK, "--port", str(port), "--api-key", key,
            "--threads", str(opts.threads), "--threads-batch", str(opts.threads),
            "--no-webui", "--no-slots", "--metrics"]


def engine_command(server: Path, opts: ServeOptions, port: int, key: str) -> list[str]:
    return [*_served_args(server, opts, port, key),
            # every slot holds a whole request's context
            "--parallel", str(opts.parallel), "--ctx-size", str(opts.ctx * opts.parallel),
            "--n-predict", str(opts.limits.max_tokens),
            # finished prompts' KV kept in host memory, at most this many MiB
            "--cache-ram", str(opts.prompt_cache_mib), *speculation_args(opts),
            *(["--rpc", ",".join(opts.rpc)] if opts.rpc else [])]


def embedding_pooling(model: Path) -> str:
    """The file's own pooling (an embedding model's converter writes one), else the last token's vector,
    as LLM-based embedders (Qwen3-Embedding, E5-Mistral) pool: a chat model has none, llama-server's
    OpenAI route needs one, and the last token's lets an input run in batches of any size."""
    fields = GGUFReader(model).fields
    arch = fields["general.architecture"].contents()
    field = fields.get(f"{arch}.pooling_type")
    pooling = PoolingType(field.contents()) if field else PoolingType.NONE
    return "last" if pooling == PoolingType.NONE else pooling.name.lower()


# Tokens per batch of the embedding engine. llama-server asks for every token's output, so its output
# buffer holds a batch's logits: 512 x a 152k vocabulary is 311 MiB (bench/results, "Embeddings").
EMBEDDING_BATCH = 512


def embedding_engine_command(server: Path, opts: ServeOptions, port: int, key: str) -> list[str]:
    """An engine for /v1/embeddings alone, so that chat keeps its slots: one input at a time, vectors
    L2-normalized (llama-server's default). Mean and CLS pooling need a whole input in one batch."""
    pooling = opts.pooling or embedding_pooling(opts.model)
    batch = str(EMBEDDING_BATCH if pooling == "last" else opts.limits.max_prompt_tokens)
    return [*_served_args(server, opts, port, key), "--embeddings", "--pooling", pooling, "--parallel", "1",
            "--ctx-size", str(opts.limits.max_prompt_tokens), "--batch-size", batch, "--ubatch-size", batch,
            "--cache-ram", "0"]


@contextmanager
def running_engine(opts: ServeOptions, embeddings: bool = False, timeout: float = 600):
    """Yields an EngineAPI once llama-server (the chat engine, or the embedding engine) has loaded the
    model; stops it on exit."""
    build = get_build(opts.build)
    check_reachable(opts.rpc)
    port, key = free_port(), secrets.token_hex(16)
    cmd = (embedding_engine_command if embeddings else engine_command)(build.tool("llama-server"), opts, port, key)
    name = f"llama-server{' for embeddings' if embeddings else ''} ({opts.build} build)"
    url = f"http://{LOOPBACK}:{port}"
    stopping = threading.Event()
    # GGML_NO_BACKTRACE: an abort's reason stays in the last lines quoted, not pushed out by gdb's backtrace.
    # The engine never outlives awq2gguf-serve (it holds nothing to save); its own process group keeps a
    # terminal's Ctrl-C from reaching it before the open answers have ended.
    with spawned(cmd, env={**build.env(), "GGML_NO_BACKTRACE": "1"}, stdin=subprocess.DEVNULL, keep_lines=LOG_LINES,
                 die_with_parent=True, own_group=True) as child:
        try:
            wait_until_ready(child, f"{name} on {opts.model.name}", timeout, EngineFailed,
                             url=f"{url}/health")  # 503 while loading
            engine = EngineAPI(url, key, _model_facts(url, key))

            def watch():
                """An engine that exits on its own (an rpc-server gone, killed for memory) cannot be
                brought back with its state: awq2gguf-serve reports it and stops, for its supervisor."""
                child.process.wait()
                if not stopping.is_set():
                    engine.failure = tool_failure(name, child.process.returncode, child.output(), EngineFailed)
                    engine.on_failure()

            threading.Thread(target=watch, daemon=True).start()
            yield engine
        finally:
            stopping.set()


class ModelFacts(NamedTuple):
    n_vocab: int
    n_embd: int
    takes_tools: bool  # whether its chat template does


def _model_facts(url: str, key: str) -> ModelFacts:
    """The model as llama-server read it."""
    def get(path: str) -> dict:
        return httpx.get(f"{url}{path}", headers={"Authorization": f"Bearer {key}"}, timeout=30).json()
    meta = get("/v1/models")["data"][0]["meta"]
    return ModelFacts(meta["n_vocab"], meta["n_embd"], get("/props")["chat_template_caps"]["supports_tools"])


class EngineAPI:
    """Calls to llama-server. Its HTTP client is made on first use, inside the server's event loop."""

    def __init__(self, url: str, key: str, facts: ModelFacts):
        self.url, self.key, self.facts = url, key, facts
        self._client: httpx.AsyncClient | None = None
        self.failure: EngineFailed | None = None  # why llama-server exited while serving
        self.on_failure: Callable[[], None] = lambda: None  # called from another thread when it does

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            # A fresh connection per call: llama-server closes idle keep-alive connections on its own
            # clock, and a request sent on one as it closes fails (a 500 under bench serve's load).
            self._client = httpx.AsyncClient(base_url=self.url, headers={"Authorization": f"Bearer {self.key}"},
                                             timeout=httpx.Timeout(None, connect=10),
                                             limits=httpx.Limits(max_keepalive_connections=0))
        return self._client

    async def _json(self, path: str, body: dict) -> dict:
        r = await self.send(path, body)
        await r.aread()
        # Any refusal is the request's: llama-server answers 500 to some messages it cannot template
        # (a tool call without a type), found by the generated requests.
        if r.status_code != 200:
            raise OpenAIError(400, f"the prompt cannot be made of this request: {error_message(r)}", "invalid_request")
        return r.json()

    async def prompt_tokens(self, path: str, body: dict) -> int:
        """Tokens of the prompt llama-server would evaluate for this completion or chat request (its
        chat template applied, BOS included)."""
        prompt = body.get("prompt", "")
        if path.endswith("chat/completions"):
            prompt = (await self._json("/apply-template", body))["prompt"]
        elif isinstance(prompt, list):  # token ids
            return len(prompt)
        return await self.text_tokens(prompt)

    async def text_tokens(self, text: str) -> int:
        """Tokens of a text as llama-server evaluates it (BOS included)."""
        return len((await self._json("/tokenize", {"content": text, "add_special": True}))["tokens"])

    async def send(self, path: str, body: dict) -> httpx.Response:
        """llama-server's response, its body not read yet (the caller streams it, then closes it); 503
        if llama-server does not answer."""
        try:
            content = json.dumps(body, ensure_ascii=False).encode()
        except UnicodeEncodeError as e:  # valid JSON ("\\ud800"), not text: no UTF-8 for it
            raise OpenAIError(400, f"the request holds a lone UTF-16 surrogate ({e.object[e.start:e.end]!a}), "
                                   "which is not text", "invalid_text") from None
        with _answering():
            return await self.client.send(self.client.build_request(
                "POST", path, content=content, headers={"content-type": "application/json"}), stream=True)

    async def metrics(self) -> str:
        """llama-server's own Prometheus metrics (its slots, tokens, speeds)."""
        with _answering():
            return (await self.client.get("/metrics")).text

    async def chat_events(self, body: dict) -> AsyncIterator[dict]:
        """A streamed chat completion's chunks, parsed; OpenAIError if llama-server refuses it."""
        r = await self.send("/v1/chat/completions", {**body, "stream": True})
        try:
            if r.status_code != 200:
                await r.aread()
                raise OpenAIError(r.status_code, error_message(r), "engine_error")
            async for line in r.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    yield json.loads(line[len("data: "):])
        finally:
            await r.aclose()


@contextmanager
def _answering():
    """503 for a request llama-server does not answer."""
    try:
        yield
    except httpx.TransportError as e:
        raise OpenAIError(503, f"the model's engine is not answering ({type(e).__name__})",
                          "engine_unavailable") from None


def error_message(r: httpx.Response) -> str:
    """llama-server's reason for a refusal, from its OpenAI-shaped error (or its status and text)."""
    try:
        return r.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return f"llama-server answered {r.status_code}: {r.text[:200]}"
