"""`bench serve`: awq2gguf-serve under concurrent streaming clients, builds on the same file."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import click

from ...builds import get_build
from ...serve.cli import DEFAULT_PARALLEL
from ...serve.options import DEFAULT_PROMPT_CACHE_MIB, SPECULATION
from ..serve import (SOAK_EMBED_EVERY, ServerConfig, bench_served, chat_turns, load_levels, on_servers, soak,
                     speculation_run, summarise, summarise_chat, summarise_soak, summarise_speculation)
from ..serve_prompts import SPECULATION_PROMPTS
from ..cli_shared import BUILDS, JSON, QTYPE, SHAPE, THREADS, check_machine, comma_ints, finish, log, progress
from ..models import quantized_by, synthetic_f16
from ..reports import Report, report_kinds
from ..tables import Table, spread


def _counts_of_at_least(minimum: int, what: str):
    """A click callback: comma-separated integers, each `minimum` or more."""
    def parse(_ctx, _param, value: str) -> tuple[int, ...]:
        counts = comma_ints(value)
        if min(counts) < minimum:
            raise click.BadParameter(f"{what} are {minimum} or more")
        return counts
    return parse


_parse_levels = _counts_of_at_least(1, "client counts")


def _parse_specs(_ctx, _param, value: str) -> tuple[str, ...]:
    specs = tuple(dict.fromkeys(v.strip() for v in value.split(",")))
    if unknown := [v for v in specs if v not in SPECULATION]:
        raise click.BadParameter(f"{', '.join(unknown)}: not one of {', '.join(SPECULATION)}")
    return specs


@dataclass(kw_only=True)
class ServeRow:
    """One server (a build and its options) at one client count, medians over the repetitions."""
    build: str  # the server's label
    clients: int
    requests: int
    requests_per_s: float
    ttft_ms_median: float
    ttft_ms_max: float  # the largest over the repetitions
    ratio: dict  # requests/s over the first server's, paired per repetition: median, min, max
    embeddings_per_s: float | None = None  # of one such prompt each (not in reports before 2026-12-07)


@report_kinds("serve")
@dataclass(kw_only=True)
class ServeReport(Report):
    threads: int
    model: str
    reps: int
    n_gen: int
    prompt_words: int
    requests_per_client: int
    rows: list[ServeRow]
    runs: dict[str, list]  # server -> every repetition as measured
    ROWS = {"rows": ServeRow}

    def table(self) -> Table:
        base = self.rows[0].build
        title = (f"awq2gguf-serve, {Path(self.model).name}: streamed completions of ~{self.prompt_words} words "
                 f"+ {self.n_gen} tokens, {self.requests_per_client} per client, {self.threads} thread(s), "
                 f"{self.reps} interleaved reps, median (min-max); a server is a build and its options")
        headers = ["server", "clients", "requests", "requests/s", "answer tokens/s", "first token ms (median)",
                   "first token ms (max)", f"requests/s vs {base}", "embeddings/s (one prompt each)"]
        rows = [[r.build, str(r.clients), str(r.requests), f"{r.requests_per_s:.3f}",
                 f"{r.requests_per_s * self.n_gen:.1f}", f"{r.ttft_ms_median:.0f}", f"{r.ttft_ms_max:.0f}",
                 "1" if r.build == base else spread(r.ratio, ".3f"),
                 "-" if r.embeddings_per_s is None else f"{r.embeddings_per_s:.2f}"] for r in self.rows]
        return Table(title, headers, rows)


SOAK_WINDOWS = 10
SOAK_WARM_UP = 0.1  # share of the requests before the RSS baseline


@dataclass(kw_only=True)
class SoakRow:
    """One server's soak: requests, errors, requests/s over the run and in each window, its RSS."""
    build: str  # the server's label
    requests: int
    errors: int
    wall_s: float
    requests_per_s: float
    requests_per_s_windows: list[float]
    rss_warm_mib: float  # at the end of the warm-up
    rss_max_mib: float   # the largest after it
    rss_growth: float
    rss_growth_late: float | None = None  # over the second half of the requests (not in reports before 2026-11-29)


@report_kinds("serve-soak")
@dataclass(kw_only=True)
class SoakReport(Report):
    threads: int
    model: str
    clients: int
    n_gen: int
    prompt_words: int
    rows: list[SoakRow]
    errors: dict[str, list[str]]  # server -> the first errors' text
    runs: dict[str, dict]  # server -> each request's end, server RSS samples
    ROWS = {"rows": SoakRow}

    def table(self) -> Table:
        title = (f"awq2gguf-serve soak, {Path(self.model).name}: {self.clients} clients streaming completions of "
                 f"~{self.prompt_words} words + {self.n_gen} tokens (every {SOAK_EMBED_EVERY}th request an embedding "
                 f"of such a prompt instead), {self.threads} thread(s); RSS growth from the "
                 f"end of the first {SOAK_WARM_UP:.0%} of the requests to the largest after it")
        headers = ["server", "requests", "errors", "requests/s", f"requests/s in each {100 // SOAK_WINDOWS}% of the run",
                   "RSS after warm-up MiB", "RSS max MiB", "RSS growth", "RSS growth, second half"]
        rows = [[r.build, str(r.requests), str(r.errors), f"{r.requests_per_s:.2f}",
                 " ".join(f"{x:.2f}" for x in r.requests_per_s_windows), f"{r.rss_warm_mib:.0f}",
                 f"{r.rss_max_mib:.0f}", f"{r.rss_growth:+.1%}",
                 "-" if r.rss_growth_late is None else f"{r.rss_growth_late:+.1%}"] for r in self.rows]
        return Table(title, headers, rows)


@dataclass(kw_only=True)
class ChatRow:
    """One server's conversations: first-token time and prompt tokens at the first and the last turn,
    medians over conversations and repetitions."""
    build: str  # the server's label
    conversations: int
    turns: int
    ttft_ms_first: float
    ttft_ms_last: float
    prompt_tokens_last: float  # evaluated at the last turn
    cached_tokens_last: float  # restored from the slot or the prompt cache at the last turn
    ratio_last: dict  # the last turn's first-token time over the first server's, per repetition


@dataclass(kw_only=True)
class _GreedyChatsReport(Report):
    """What the chat and the speculation runs record besides their rows."""
    threads: int
    model: str
    reps: int
    max_tokens: int
    runs: dict[str, list]  # server -> each repetition's answers (or turns) and llama-server's timings


@report_kinds("serve-chat")
@dataclass(kw_only=True)
class ChatReport(_GreedyChatsReport):
    rows: list[ChatRow]
    ROWS = {"rows": ChatRow}

    def table(self) -> Table:
        base = self.rows[0].build
        r0 = self.rows[0]
        title = (f"awq2gguf-serve, {Path(self.model).name}: {r0.conversations} chats of {r0.turns} turns taken in "
                 f"turn, answers of up to {self.max_tokens} tokens, {self.threads} thread(s), {self.reps} "
                 f"interleaved reps, medians over chats and reps")
        headers = ["server", "first token ms, turn 1", f"first token ms, turn {r0.turns}",
                   f"prompt tokens evaluated, turn {r0.turns}", f"prompt tokens cached, turn {r0.turns}",
                   f"turn {r0.turns} first token vs {base}"]
        rows = [[r.build, f"{r.ttft_ms_first:.0f}", f"{r.ttft_ms_last:.0f}", f"{r.prompt_tokens_last:.0f}",
                 f"{r.cached_tokens_last:.0f}", "1" if r.build == base else spread(r.ratio_last, ".3f")]
                for r in self.rows]
        return Table(title, headers, rows)


@dataclass(kw_only=True)
class SpeculationRow:
    """One server on one kind of prompt: decode speed, drafts accepted, answers unlike its build's without
    speculation."""
    build: str  # the server's label
    prompts: str
    answers: int
    tokens: int  # answer tokens of one repetition
    decode_tokens_per_s: float
    ratio: dict  # decode tokens/s over the first server's, per repetition
    drafted: int  # over all repetitions
    acceptance: float | None  # share of the drafted tokens the model kept
    answers_differing: int  # from the same build's without speculation, repetition by repetition


@report_kinds("serve-spec")
@dataclass(kw_only=True)
class SpeculationReport(_GreedyChatsReport):
    rows: list[SpeculationRow]
    ROWS = {"rows": SpeculationRow}

    def table(self) -> Table:
        base = self.rows[0].build
        title = (f"awq2gguf-serve, {Path(self.model).name}: one stream of greedy chat requests, answers of up to "
                 f"{self.max_tokens} tokens, {self.threads} thread(s), {self.reps} interleaved reps; decode speed "
                 f"as llama-server times it (median)")
        headers = ["server", "prompts", "answers", "answer tokens", "decode tokens/s", f"vs {base}",
                   "drafted", "accepted", "answers unlike without speculation"]
        rows = [[r.build, r.prompts, str(r.answers), str(r.tokens), f"{r.decode_tokens_per_s:.1f}",
                 "1" if r.build == base else spread(r.ratio, ".3f"), str(r.drafted),
                 "-" if r.acceptance is None else f"{r.acceptance:.0%}", str(r.answers_differing)]
                for r in self.rows]
        return Table(title, headers, rows)


@click.command()
@THREADS
@click.option("--model", "-m", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="GGUF every build serves. Default: the synthetic --shape model in --qtype, quantized once by "
                   "the patched build (the same file for every build).")
@SHAPE
@QTYPE
@BUILDS
@click.option("--clients", "levels", default="1,2,4", show_default=True, callback=_parse_levels,
              help="Concurrent clients, comma-separated: one measurement per count.")
@click.option("--parallel", "parallels", default=str(DEFAULT_PARALLEL), show_default=True, callback=_parse_levels,
              help="awq2gguf-serve's --parallel, comma-separated: each build is served with each (1: one "
                   "answer at a time).")
@click.option("--requests", "requests_per_client", type=click.IntRange(min=1), default=4, show_default=True,
              help="Requests each client sends, one after another.")
@click.option("--prompt-words", type=click.IntRange(min=2), default=100, show_default=True)
@click.option("--n-gen", type=click.IntRange(min=1), default=64, show_default=True, help="Tokens per answer.")
@click.option("--reps", type=click.IntRange(min=1), default=3, show_default=True,
              help="Repetitions per build, interleaved ABBA, each on a fresh server.")
@click.option("--prompt-cache", "caches", default=str(DEFAULT_PROMPT_CACHE_MIB), show_default=True,
              callback=_counts_of_at_least(0, "sizes"), help="awq2gguf-serve's --prompt-cache in MiB, comma-separated: each build is "
                                          "served with each (0: none).")
@click.option("--spec", "specs", default="none", show_default=True, callback=_parse_specs,
              help=f"awq2gguf-serve's --spec, comma-separated ({', '.join(SPECULATION)}): each build is served "
                   "with each.")
@click.option("--draft", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Also serve each build with this draft model (awq2gguf-serve --draft).")
@click.option("--chat", "turns", type=click.IntRange(min=2), metavar="TURNS",
              help="Instead: the largest --clients count of chats of TURNS turns, taken in turn, on each server: "
                   "first-token time and prompt tokens evaluated per turn (the prompt cache's use).")
@click.option("--speculation", is_flag=True,
              help="Instead: one stream of greedy chat requests, code edits and questions (answers up to --n-gen "
                   "tokens), on each server: decode tokens/s, drafts accepted, answers compared.")
@click.option("--soak", "soak_n", type=click.IntRange(min=1), metavar="N",
              help="Instead: N requests from the largest --clients count to each server (a build and its options): "
                   "requests/s over time, errors, the server's RSS growth after warm-up and over the second half.")
@JSON
def serve(threads, model, shape, qtype, build_names, levels, parallels, requests_per_client, prompt_words, n_gen, reps,
          caches, specs, draft, turns, speculation, soak_n, as_json):
    """awq2gguf-serve under load: requests/s and time to first token at each client count, streamed
    completions through the OpenAI API, builds compared on the same file."""
    busy = check_machine(threads)
    builds = [get_build(n) for n in build_names]
    model = model or quantized_by(get_build("patched"), synthetic_f16(shape, log), qtype, log)
    servers = [ServerConfig(b, p, c, s) for b, p, c, s in itertools.product(builds, parallels, caches, specs)]
    if draft:
        servers += [ServerConfig(b, p, c, "none", draft) for b, p, c in itertools.product(builds, parallels, caches)]
    queue = max(max(s.parallel for s in servers), *levels)
    if turns:
        conversations = max(levels)
        with progress("chat turns", reps * len(servers) * conversations * turns) as advance:
            runs = on_servers(servers, reps, model, threads, queue,
                              lambda server: chat_turns(server, conversations, turns, n_gen, advance))
        report = ChatReport(kind="serve-chat", threads=threads, model=str(model), reps=reps, max_tokens=n_gen,
                            busy_warning=busy, rows=summarise_chat(runs), runs=runs)
        return finish(report, as_json)
    if speculation:
        plain_of = {s.label(): s._replace(spec="none", draft=None).label() for s in servers}
        if missing := sorted(set(plain_of.values()) - {s.label() for s in servers}):
            raise click.UsageError(f"--speculation compares each build with itself without speculation: add none to "
                                   f"--spec (no {missing[0]})")
        prompts = sum(map(len, SPECULATION_PROMPTS.values()))
        with progress("speculation requests", reps * len(servers) * prompts) as advance:
            runs = on_servers(servers, reps, model, threads, queue,
                              lambda server: speculation_run(server, n_gen, advance))
        report = SpeculationReport(kind="serve-spec", threads=threads, model=str(model), reps=reps, max_tokens=n_gen,
                                   busy_warning=busy, rows=summarise_speculation(runs, plain_of), runs=runs)
        return finish(report, as_json)
    if soak_n:
        # (no more slots than clients: the queue holds one request per client)
        servers = list(dict.fromkeys(s._replace(parallel=min(s.parallel, max(levels))) for s in servers))
        runs = {}
        with progress("soak requests", soak_n * len(servers)) as advance:
            for config in servers:
                with bench_served(model, config, threads, max(levels)) as server:
                    runs[config.label()] = soak(server.url, server.process.pid, max(levels), soak_n,
                                              prompt_words, n_gen, on_request=advance)
        report = SoakReport(kind="serve-soak", threads=threads, model=str(model), clients=max(levels), n_gen=n_gen,
                            prompt_words=prompt_words, busy_warning=busy, errors={b: r["errors"][:20] for b, r in runs.items()},
                            rows=[{"build": b, **summarise_soak(r, SOAK_WINDOWS, SOAK_WARM_UP)} for b, r in runs.items()],
                            runs={b: {"ends_s": r["ends_s"], "rss": r["rss"]} for b, r in runs.items()})
        return finish(report, as_json)
    with progress("serving load levels", reps * len(servers) * len(levels)) as advance:
        runs = on_servers(servers, reps, model, threads, queue,
                          lambda server: load_levels(server, levels, requests_per_client, prompt_words, n_gen, advance))
    report = ServeReport(kind="serve", threads=threads, model=str(model), reps=reps, n_gen=n_gen,
                         prompt_words=prompt_words, requests_per_client=requests_per_client, busy_warning=busy,
                         rows=summarise(runs, levels), runs=runs)
    finish(report, as_json)
