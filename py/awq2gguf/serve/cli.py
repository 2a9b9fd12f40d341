"""`awq2gguf-serve MODEL.gguf`: an OpenAI-compatible endpoint and a chat page on a llama.cpp build."""

from __future__ import annotations

import ipaddress
import signal
import socket
import sys
from contextlib import nullcontext
from pathlib import Path

import click

from ..cli_options import RPC, THREADS, build_option
from ..cli_base import Command
from ..processes import LOOPBACK
from .limits import DEFAULT_MAX_BODY_MIB, Limits
from .options import DEFAULT_PROMPT_CACHE_MIB, SPECULATION, ServeOptions

DEFAULT_PARALLEL = 4  # measured in bench/results/README.md: batching 4 answers multiplies decode tokens/s


def _is_loopback(host: str) -> bool:
    try:
        return all(ipaddress.ip_address(info[4][0]).is_loopback
                   for info in socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP))
    except (socket.gaierror, ValueError):
        return False


def _gguf(_ctx, _param, path: Path | None) -> Path | None:
    if path is None:
        return None
    with open(path, "rb") as f:
        if f.read(4) != b"GGUF":
            raise click.BadParameter(f"{path} is not a GGUF file")
    return path.resolve()


@click.command(cls=Command, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("model", type=click.Path(exists=True, dir_okay=False, path_type=Path), callback=_gguf)
@build_option("llama.cpp build whose llama-server runs the model (stock: for comparison).")
@click.option("--host", default=LOOPBACK, show_default=True,
              help="Address to listen on. Anything but loopback needs --api-key.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True)
@click.option("--api-key", envvar="AWQ2GGUF_API_KEY", show_envvar=True,
              help="Bearer key the API requires (401 without it), and the chat page's password.")
@THREADS
@click.option("--ctx", type=click.IntRange(min=64), default=4096, show_default=True,
              help="Context per request: prompt and answer together.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=512, show_default=True,
              help="Longest answer a request may ask for (400 beyond it); requests without max_tokens get it.")
@click.option("--max-prompt-tokens", type=click.IntRange(min=1),
              help="Longest prompt (400 beyond it).  [default: --ctx minus --max-tokens]")
@click.option("--parallel", "-np", type=click.IntRange(min=1), default=DEFAULT_PARALLEL, show_default=True,
              help="Answers decoded together (llama-server's slots): one pass over the weights serves them all. "
                   "Each holds a whole --ctx of KV cache.")
@click.option("--queue", type=click.IntRange(min=1), default=16, show_default=True,
              help="Generation requests running or waiting at once, and as many embedding requests; more get 503 "
                   "(with Retry-After).")
@click.option("--max-body", "max_body_mib", type=click.IntRange(min=1), default=DEFAULT_MAX_BODY_MIB,
              show_default=True, metavar="MIB", help="Largest request body; a bigger one gets 413 before it is read.")
@click.option("--alias", "aliases", multiple=True, metavar="NAME",
              help="Another name a request's `model` may give (repeatable): /v1/models lists the file's stem and "
                   "these; any other name gets 404.")
@click.option("--embeddings/--no-embeddings", default=None,
              help="/v1/embeddings, on an engine of its own (a second llama-server on the same file, so that "
                   "chat keeps its slots; it holds a second copy of the weights): one input of up to "
                   "--max-prompt-tokens at a time, vectors L2-normalized.  "
                   "[default: on, but off with --rpc: an rpc-server serves one engine]")
@click.option("--pooling", type=click.Choice(["mean", "last", "cls"]),
              help="How an input's token vectors make its embedding (mean and cls need a whole input in one batch).  "
                   "[default: the file's own, else last]")
@click.option("--prompt-cache", "prompt_cache_mib", type=click.IntRange(min=0), default=DEFAULT_PROMPT_CACHE_MIB,
              show_default=True, metavar="MIB",
              help="Host memory for the KV of finished prompts: a request that starts with one (the next turn of a "
                   "chat, a shared system prompt) skips its prefill even after its slot served others. The oldest "
                   "go first when full; 0: none (a slot still reuses its own last prompt).")
@click.option("--spec", type=click.Choice(list(SPECULATION)), default="none", show_default=True,
              help="Speculative decoding without a draft model: ngram drafts the tokens that followed the last few "
                   "in the request's own text, and the model verifies them in one pass: answers that repeat their "
                   "input (code edits, quotes) come faster; on the patched build greedy answers stay the same.")
@click.option("--draft", type=click.Path(exists=True, dir_okay=False, path_type=Path), callback=_gguf,
              help="A small GGUF with the model's vocabulary that drafts tokens for the model to verify (for example "
                   "the same checkpoint with blocks dropped: awq2gguf MODEL_DIR draft.gguf --drop-blocks N).")
@RPC
@click.option("--page/--no-page", default=True, show_default=True,
              help="The chat page at /chat. --no-page serves the API alone and never loads gradio.")
@click.option("--shutdown-timeout", type=click.FloatRange(min=0), default=30, show_default=True,
              help="On SIGTERM or Ctrl-C, seconds the open answers get to finish before they are cut (new connections "
                   "are refused at once).")
def main(model, build_name, host, port, api_key, threads, ctx, max_tokens, max_prompt_tokens, parallel, queue,
         max_body_mib, aliases, embeddings, pooling, prompt_cache_mib, spec, draft, rpc, page, shutdown_timeout):
    """Serve MODEL.gguf: an OpenAI-compatible API under /v1 and a chat page at /chat (unless --no-page).

    The build's llama-server runs the model, decoding up to --parallel answers together (the
    others wait their turn); a second one serves /v1/embeddings (unless --no-embeddings). This
    server in front of them checks the key and the limits: a full queue answers 503, a body over
    --max-body 413, another model's name 404, over-long prompts and answers 400, malformed
    requests 400 naming the field (types are strict: "10" is not a number). The chat page
    streams each answer, shows its prefill and decode speed, and how the GGUF was made (its
    awq2gguf metadata). SIGTERM or Ctrl-C lets the open answers finish (up to --shutdown-timeout),
    then exits. If llama-server exits on its own (an rpc-server gone, out of memory), requests get
    503 and awq2gguf-serve exits 1 with llama-server's last lines, for its supervisor to restart it.
    """
    if max_prompt_tokens is None:
        if max_tokens >= ctx:
            raise click.UsageError(f"--max-tokens {max_tokens} leaves no room for a prompt in --ctx {ctx}")
        max_prompt_tokens = ctx - max_tokens
    elif max_prompt_tokens + max_tokens > ctx:
        raise click.UsageError(f"--max-prompt-tokens {max_prompt_tokens} plus --max-tokens {max_tokens} "
                               f"is more than --ctx {ctx}")
    if parallel > queue:
        raise click.UsageError(f"--parallel {parallel} is more than --queue {queue}: the extra slots would never run")
    if embeddings and rpc:
        raise click.UsageError("--embeddings cannot go with --rpc: an rpc-server serves one engine, the chat's")
    embeddings = not rpc if embeddings is None else embeddings
    if not api_key and not _is_loopback(host):
        raise click.UsageError(f"--host {host} exposes the server beyond this machine: give it an --api-key "
                               "(or AWQ2GGUF_API_KEY)")
    import uvicorn

    from .app import PAGE_PATH, create_app
    from .engine import running_engine

    limits = Limits(max_prompt_tokens, max_tokens, queue, max_body_mib << 20)
    opts = ServeOptions(model, build_name, threads, ctx, parallel, limits, api_key, rpc, page, prompt_cache_mib, spec,
                        draft, aliases, embeddings, pooling)
    with running_engine(opts) as engine, \
            (running_engine(opts, embeddings=True) if embeddings else nullcontext()) as embedder:
        engines = [e for e in (engine, embedder) if e]
        app = create_app(opts, engine, embedder)
        shown = f"[{host}]" if ":" in host else host
        click.echo(f"serving {model.name} with the {build_name} build's llama-server ({parallel} answers at once) on "
                   f"http://{shown}:{port}: OpenAI API at /v1" + (f", chat page at {PAGE_PATH}" if page else ""), err=True)
        # uvicorn lets the open answers end (each at its max_tokens at most), cancels them after the
        # timeout, then raises the signal that stopped it again: a stop that let them end is a
        # normal exit, without a traceback.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        signal.signal(signal.SIGINT, lambda *_: sys.exit(128 + signal.SIGINT))
        server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning",
                                               timeout_graceful_shutdown=shutdown_timeout))
        for e in engines:
            e.on_failure = lambda: setattr(server, "should_exit", True)
        if not any(e.failure for e in engines):  # (one may have exited before on_failure was set)
            server.run()
        for e in engines:
            if e.failure:
                raise e.failure
