"""awq2gguf-serve driven as its users would: the OpenAI client, concurrent clients, a browser."""

import json
import shutil
import signal
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import hypothesis
import numpy as np
import openai
import psutil
import pytest
import schemathesis
from click.testing import CliRunner
from conftest import SERVE_KEY as KEY, openai_client as client, rpc_servers
from gguf import GGUFReader

from awq2gguf.metadata import Key
from awq2gguf.processes import LOOPBACK
from awq2gguf.serve.cli import main as serve_main
from awq2gguf.serve.process import CLIENT_ALIAS, free_port, served


@pytest.fixture(scope="module")
def server(smollm2_q4_0):
    """Loopback, no key, a 1024-token context and 256-token answers."""
    with served(smollm2_q4_0, "patched", 2, "--ctx", "1024", "--max-tokens", "256") as s:
        yield s.url


@pytest.fixture(scope="module")
def keyed_server(smollm2_q4_0):
    """With an API key, a queue of one request, and no embeddings."""
    with served(smollm2_q4_0, "patched", 2, "--queue", "1", "--parallel", "1", "--no-embeddings", api_key=KEY) as s:
        yield s.url


def test_openai_client_gets_a_completion_and_a_streamed_chat_completion(server):
    api = client(server)
    text = api.completions.create(model=CLIENT_ALIAS, prompt="The capital of France is", max_tokens=8,
                                     temperature=0).choices[0].text
    assert len(text.strip()) > 0

    messages = [{"role": "user", "content": "Name three colours."}]
    whole = api.chat.completions.create(model=CLIENT_ALIAS, messages=messages, max_tokens=32, temperature=0)
    chunks = [c.choices[0].delta.content for c in api.chat.completions.create(
        model=CLIENT_ALIAS, messages=messages, max_tokens=32, temperature=0, stream=True) if c.choices[0].delta.content]
    assert len(chunks) > 3  # token by token, not one piece
    assert "".join(chunks) == whole.choices[0].message.content  # greedy: the same answer either way


# Different first words: no two prompts share a cached prefix, so each answer is computed the same
# way whichever request ran before it.
PROMPTS = ["Apples are", "Berlin is a city", "Cats like to", "Dolphins can", "Engines need", "Forests have",
           "Guitars make", "Honey is made by"]


def test_eight_concurrent_streams_each_get_their_own_answer(server):
    """Decoded together, four at a time (the default --parallel): each answer is the one it gets alone."""
    api = client(server)

    def ask(prompt, stream):
        out = api.completions.create(model=CLIENT_ALIAS, prompt=prompt, max_tokens=24, temperature=0, stream=stream)
        return "".join(c.choices[0].text for c in out) if stream else out.choices[0].text

    alone = [ask(p, False) for p in PROMPTS]
    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        together = list(pool.map(lambda p: ask(p, True), PROMPTS))
    assert together == alone
    assert len(set(alone)) == len(PROMPTS)


def test_over_long_requests_get_400_and_the_server_goes_on(server):
    api = client(server)
    with pytest.raises(openai.BadRequestError, match="the prompt is [0-9]+ tokens, over this server's limit of 768"):
        api.chat.completions.create(model=CLIENT_ALIAS, messages=[{"role": "user", "content": "word " * 2000}], stream=True)
    with pytest.raises(openai.BadRequestError, match="max_tokens 10000 is over this server's limit of 256"):
        api.completions.create(model=CLIENT_ALIAS, prompt="Hello", max_tokens=10000)
    assert api.completions.create(model=CLIENT_ALIAS, prompt="Hello", max_tokens=4).usage.completion_tokens == 4


@pytest.mark.parametrize("body, message", [
    (b'{"messages": [', "the request body is not valid JSON: Expecting value"),
    (b"\xff\xfe", "the request body is not valid JSON"),
    (b'["Hello"]', "the request body must be a JSON object"),
])
def test_a_body_that_is_not_a_json_object_gets_400_and_the_server_goes_on(server, body, message):
    for path in ("/v1/chat/completions", "/v1/completions"):
        for content_type in ("application/json", "application/x-www-form-urlencoded"):  # the second: curl -d
            r = httpx.post(f"{server}{path}", content=body, headers={"content-type": content_type})
            assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
            assert r.json()["error"]["message"].startswith(message)
    assert client(server).completions.create(model=CLIENT_ALIAS, prompt="Hello", max_tokens=4).usage.completion_tokens == 4


def test_a_json_body_sent_as_a_form_is_served(server):
    r = httpx.post(f"{server}/v1/completions", content=b'{"prompt": "Hello", "max_tokens": 2}',
                   headers={"content-type": "application/x-www-form-urlencoded"}, timeout=300)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 2


def test_answers_name_the_model_by_its_alias_never_by_its_path(server, smollm2_q4_0):
    api = client(server)
    assert api.completions.create(model=CLIENT_ALIAS, prompt="Hello", max_tokens=2).model == smollm2_q4_0.stem
    r = httpx.post(f"{server}/v1/completions", json={"prompt": "Hello", "max_tokens": 2}, timeout=300)
    assert r.status_code == 200 and r.json()["model"] == smollm2_q4_0.stem
    chunks = api.chat.completions.create(model=CLIENT_ALIAS, messages=[{"role": "user", "content": "Hi"}], max_tokens=2,
                                         stream=True)
    assert {c.model for c in chunks} == {smollm2_q4_0.stem}


@pytest.fixture(scope="module")
def short_server(smollm2_q4_0):
    """Answers of at most 4 tokens: many generated requests in little time. The API alone, no chat page;
    bodies of 1 MiB at most."""
    with served(smollm2_q4_0, "patched", 2, "--ctx", "512", "--max-tokens", "4", "--no-page", "--max-body", "1") as s:
        yield s


def test_without_the_page_the_api_is_served_alone(short_server):
    assert httpx.get(f"{short_server.url}/chat", timeout=30).status_code == 404
    assert httpx.get(f"{short_server.url}/", timeout=30).status_code == 404
    assert httpx.get(f"{short_server.url}/v1/models", timeout=30).json()["data"][0]["object"] == "model"


def _with_lone_surrogates(value):
    """Every string in a request body with a lone UTF-16 surrogate added: valid JSON ("\\ud800"), not
    text (no UTF-8 for it)."""
    if isinstance(value, str):
        return value + "\ud800"
    if isinstance(value, list):
        return [_with_lone_surrogates(v) for v in value]
    if isinstance(value, dict):
        return {k: _with_lone_surrogates(v) for k, v in value.items()}
    return value


@pytest.mark.parametrize("mode", list(schemathesis.GenerationMode), ids=lambda m: m.value)
def test_requests_generated_from_the_openapi_schema_never_get_a_5xx(short_server, mode):
    """Every operation of the server's OpenAPI schema, with bodies that fit it (positive) or break it
    (negative: wrong types, missing fields, values out of range), each sent again with lone surrogates
    in its strings: a client's request never makes the server fail. Bounded: 25 requests per operation
    and mode, not shrunk."""
    schema = schemathesis.openapi.from_url(f"{short_server.url}/openapi.json")
    operations = [result.ok() for result in schema.get_all_operations()]
    assert {"/v1/completions", "/v1/chat/completions", "/v1/embeddings"} <= {op.path for op in operations}
    failures = []
    for operation in operations:
        @hypothesis.given(case=operation.as_strategy(generation_mode=mode))
        @hypothesis.settings(max_examples=25, deadline=None, derandomize=True, database=None,
                             phases=[hypothesis.Phase.generate], suppress_health_check=list(hypothesis.HealthCheck))
        def check(case):
            response = case.call(base_url=short_server.url, timeout=120)
            assert response.status_code < 500, (f"{case.method} {case.path} {case.body!r} -> "
                                                f"{response.status_code} {response.text[:300]}")
            if case.method == "POST" and isinstance(case.body, (dict, list)):
                body = json.dumps(_with_lone_surrogates(case.body))  # ASCII JSON: "\\ud800" escapes
                response = httpx.post(f"{short_server.url}{case.path}", content=body, timeout=120,
                                      headers={"content-type": "application/json"})
                assert response.status_code < 500, (f"{case.path} {body[:300]} -> {response.status_code} "
                                                    f"{response.text[:300]}")
        try:
            check()
        except AssertionError as e:
            failures.append(str(e).splitlines()[0])
        except hypothesis.errors.Unsatisfiable:  # nothing to break (GET /v1/models and /metrics take no parameters)
            assert mode == schemathesis.GenerationMode.NEGATIVE and operation.path in {"/v1/models", "/metrics"}
    assert not failures, "\n".join(failures)


# What this server's schema refuses, and what llama-server refuses itself (passed on as it says it).
MALFORMED = [
    ("/v1/completions", {"prompt": "Hi", "grammar": "root ::= undefined-rule"},
     "Failed to initialize samplers: failed to parse grammar"),
    ("/v1/completions", {"prompt": [1, 2, 99999999]}, "Prompt contains invalid tokens"),
    ("/v1/completions", {"prompt": ["Hi", "there"]}, "invalid request: body.prompt.str: Input should be a valid string"),
    ("/v1/completions", {}, "invalid request: body.prompt: Field required"),
    ("/v1/completions", {"prompt": ""}, "invalid request: body.prompt: Value should have at least 1 item"),
    ("/v1/completions", {"prompt": "Hi", "temperature": "hot"}, "invalid request: body.temperature"),
    ("/v1/completions", {"prompt": "Hi", "n": 3}, "invalid request: body.n: Input should be 1"),
    ("/v1/chat/completions", {"messages": "Hi"}, "invalid request: body.messages: Input should be a valid list"),
    ("/v1/chat/completions", {"messages": []}, "invalid request: body.messages: List should have at least 1 item"),
    ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "Hi"}]}, "invalid request: body.messages.0"),
    ("/v1/completions", {"prompt": "Hi", "logit_bias": {"99999999": 5}},
     "invalid request: body.logit_bias: '99999999' is not a token id of this model (0 to 49151)"),
    ("/v1/completions", {"prompt": "Hi", "logit_bias": {"5": 101}}, "invalid request: body.logit_bias.5"),
    # strict types, as OpenAI's: nothing is converted
    ("/v1/completions", {"prompt": "Hi", "max_tokens": "10"}, "invalid request: body.max_tokens: Input should be a "
                                                              "valid integer"),
    ("/v1/completions", {"prompt": "Hi", "stream": "true"}, "invalid request: body.stream: Input should be a valid "
                                                            "boolean"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}]},
     "invalid request: body.messages.0.user.content: this model takes text only, not a content part of type "
     "'image_url'"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "response_format": {
        "type": "json_schema", "json_schema": {"name": "a", "schema": {"$ref": "#/$defs/Missing"}}}},
     "invalid request: body.response_format.json_schema.schema: $ref '#/$defs/Missing' points at nothing in the "
     "schema"),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}], "tools": [{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"x": {"$ref": "https://example.com/x.json"}}}}}]},
     "invalid request: body.tools.0.function.parameters: $ref 'https://example.com/x.json' is outside the schema"),
    ("/v1/embeddings", {"input": ""}, "invalid request: body.input: should be a non-empty text, list of texts"),
    ("/v1/embeddings", {"input": ["Hi", 5]}, "invalid request: body.input: should be a non-empty text, list of texts"),
    ("/v1/embeddings", {"input": ["Hi"] * 2049}, "invalid request: body.input: holds 2049 inputs, over the limit of "
                                                 "2048"),
    ("/v1/embeddings", {"input": "Hi", "dimensions": 7},
     "invalid request: body.dimensions: this model's embeddings have 576 dimensions, and are not shortened to 7"),
    ("/v1/embeddings", {"input": "Hi", "encoding_format": "hex"}, "invalid request: body.encoding_format: Input "
                                                                  "should be 'float' or 'base64'"),
    ("/v1/embeddings", {"input": "word " * 600}, "the input is 601 tokens, over this server's limit of 508"),
    ("/v1/embeddings", {"input": ["Hi", "word " * 600]}, "input 1 is 601 tokens, over this server's limit of 508"),
]


@pytest.mark.parametrize("path, body", [
    ("/v1/completions", b'{"prompt": "Hi \\ud800 there"}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "Hi \\udfff"}]}'),
    ("/v1/chat/completions", b'{"messages": [{"role": "user", "content": "Hi"}], "stop": ["\\ud83d"]}'),
])
def test_a_lone_utf16_surrogate_gets_400_saying_so(short_server, path, body):
    r = httpx.post(f"{short_server.url}{path}", content=body, headers={"content-type": "application/json"}, timeout=120)
    assert r.status_code == 400 and "lone UTF-16 surrogate" in r.json()["error"]["message"], r.text[:300]
    assert "\\ud" in r.json()["error"]["message"]


@pytest.mark.parametrize("path, body, message", MALFORMED, ids=[f"{p}-{i}" for i, (p, _, _) in enumerate(MALFORMED)])
def test_malformed_requests_get_400_with_the_reason(short_server, path, body, message):
    r = httpx.post(f"{short_server.url}{path}", json=body, timeout=120)
    assert r.status_code == 400 and r.json()["error"]["message"].startswith(message), r.text[:300]
    assert "\n" not in r.json()["error"]["message"]


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_over_the_limit_gets_413(short_server, chunked):
    """20 MB against --max-body 1: the answer is a 413, not a reset connection, whether the client says
    the length first or not."""
    body = json.dumps({"prompt": "x" * (20 << 20)}).encode()
    content = (body[i:i + (1 << 16)] for i in range(0, len(body), 1 << 16)) if chunked else body
    r = httpx.post(f"{short_server.url}/v1/completions", content=content, timeout=120,
                   headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"]["message"] == (
        "the request body is over this server's limit of 1048576 bytes")
    assert client(short_server.url).completions.create(model=CLIENT_ALIAS, prompt="x " * 400, max_tokens=1).choices


def test_null_is_the_default(short_server):
    r = httpx.post(f"{short_server.url}/v1/completions", timeout=120,
                   json={"prompt": "Hi", "frequency_penalty": None, "stop": None, "max_tokens": None})
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] > 0


def test_only_the_served_model_is_answered_under_its_names(short_server, smollm2_q4_0):
    """/v1/models lists the file's stem and the --alias; any other `model` gets 404, as from OpenAI."""
    names = [m.id for m in client(short_server.url).models.list()]
    assert names == [smollm2_q4_0.stem, CLIENT_ALIAS]
    for name in names:
        assert client(short_server.url).completions.create(model=name, prompt="Hi", max_tokens=1).choices
    for path, body in [("/v1/completions", {"prompt": "Hi"}), ("/v1/embeddings", {"input": "Hi"}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi"}]})]:
        r = httpx.post(f"{short_server.url}{path}", json={**body, "model": "gpt-4o"}, timeout=120)
        assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found", r.text
        assert r.json()["error"]["message"] == (f"the model 'gpt-4o' is not served here, only {smollm2_q4_0.stem!r} or "
                                                f"'{CLIENT_ALIAS}' (see /v1/models)")


EMBEDDED = ["The capital of France is Paris.", "Quantized weights take four bits each.", "Ein kurzer Satz, une phrase."]


def _llama_embedding(build, model, texts: list[str]) -> np.ndarray:
    """llama.cpp's own llama-embedding on the texts (one per line), pooled and normalized as served."""
    out = build.run("llama-embedding", ["-m", str(model), "-t", "2", "--pooling", "last", "--embd-normalize", "2",
                                        "--embd-output-format", "json", "-p", "\n".join(texts)])
    return np.array([d["embedding"] for d in json.loads(out.stdout)["data"]])


def test_embeddings_equal_llama_embeddings_on_the_same_texts(short_server, smollm2_q4_0, builds):
    """The openai client's embeddings.create (which asks for base64), floats, and token ids: one
    L2-normalized vector per input, equal to llama-embedding's (the last token's: SmolLM2 has no pooling of
    its own)."""
    api = client(short_server.url)
    got = api.embeddings.create(model=CLIENT_ALIAS, input=EMBEDDED)
    vectors = np.array([d.embedding for d in got.data])
    assert [d.index for d in got.data] == [0, 1, 2] and vectors.shape == (3, 576)
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    reference = _llama_embedding(builds["patched"], smollm2_q4_0, EMBEDDED)
    cosine = (vectors * reference).sum(axis=1) / np.linalg.norm(reference, axis=1)
    assert cosine.min() > 1 - 1e-4, cosine
    floats = api.embeddings.create(model=CLIENT_ALIAS, input=EMBEDDED[0], encoding_format="float")
    assert np.allclose(floats.data[0].embedding, vectors[0], atol=1e-6)
    ids = api.embeddings.create(model=CLIENT_ALIAS, input=[[1, 2, 3], [4, 5]]).data
    assert len(ids) == 2 and all(len(d.embedding) == 576 for d in ids)
    assert not np.allclose(ids[0].embedding, ids[1].embedding)
    alone = [api.embeddings.create(model=CLIENT_ALIAS, input=text).usage.prompt_tokens for text in EMBEDDED]
    assert got.usage.prompt_tokens == got.usage.total_tokens == sum(alone) and min(alone) > 3


def test_the_server_answers_after_the_generated_requests(short_server):
    assert client(short_server.url).completions.create(model=CLIENT_ALIAS, prompt="Hello", max_tokens=4).usage.completion_tokens == 4


def _end_of_text_banned(model) -> dict[str, float]:
    """logit_bias keeping the model from ending its answer: every end-of-generation token banned."""
    fields = GGUFReader(model).fields
    tokens = fields["tokenizer.ggml.tokens"].contents()
    ends = {tokens.index(t) for t in ("<|endoftext|>", "<|im_end|>") if t in tokens}
    ends.add(fields["tokenizer.ggml.eos_token_id"].contents())
    return {str(t): -100 for t in ends}


@pytest.fixture(scope="module")
def long_server(smollm2_q4_0):
    """A queue of one request and answers of up to 4000 tokens (tens of seconds each)."""
    with served(smollm2_q4_0, "patched", 2, "--queue", "1", "--parallel", "1", "--ctx", "4096",
                "--max-tokens", "4000") as s:
        yield s


def test_a_client_that_disconnects_frees_its_place_at_once(long_server, smollm2_q4_0):
    api = client(long_server.url)
    stream = api.completions.create(model=CLIENT_ALIAS, prompt="1, 2, 3, 4,", max_tokens=4000, temperature=0, stream=True,
                                    logit_bias=_end_of_text_banned(smollm2_q4_0))
    chunks = iter(stream)
    next(chunks), next(chunks)
    stream.close()
    start = time.monotonic()
    while True:  # 503 while the abandoned answer would still hold the one place; a wait while it holds the slot
        try:
            api.completions.create(model=CLIENT_ALIAS, prompt="Hello", max_tokens=2)
            break
        except openai.InternalServerError as e:
            assert e.status_code == 503
            assert time.monotonic() - start < 10, "the abandoned answer kept its place"
            time.sleep(0.1)
    assert time.monotonic() - start < 10, "the abandoned answer kept running"


@pytest.mark.parametrize("stop, status", [(signal.SIGTERM, 0), (signal.SIGINT, 130)], ids=["SIGTERM", "SIGINT"])
def test_a_stop_signal_lets_an_open_stream_finish_then_exits(smollm2_q4_0, stop, status):
    with served(smollm2_q4_0, "patched", 2) as s:
        api = client(s.url)
        whole = api.completions.create(model=CLIENT_ALIAS, prompt="Once upon a time", max_tokens=48, temperature=0,
                                       logit_bias=_end_of_text_banned(smollm2_q4_0)).choices[0].text
        chunks = iter(api.completions.create(model=CLIENT_ALIAS, prompt="Once upon a time", max_tokens=48, temperature=0,
                                             logit_bias=_end_of_text_banned(smollm2_q4_0), stream=True))
        first = next(chunks).choices[0].text
        s.process.send_signal(stop)
        time.sleep(0.5)
        with pytest.raises(httpx.ConnectError):  # no new connections once stopping
            httpx.get(f"{s.url}/v1/models")
        assert first + "".join(c.choices[0].text for c in chunks) == whole
        assert s.process.wait(timeout=30) == status
        assert "Traceback" not in s.output()


def _engines(served_process) -> dict[str, psutil.Process]:
    """awq2gguf-serve's llama-servers: the chat engine's and the embedding engine's."""
    children = psutil.Process(served_process.pid).children()
    assert all(c.name() == "llama-server" for c in children)
    return {"embeddings" if "--embeddings" in c.cmdline() else "chat": c for c in children}


def test_the_engines_never_outlive_the_server(smollm2_q4_0):
    with served(smollm2_q4_0, "patched", 2) as s:
        engines = _engines(s.process)
        assert set(engines) == {"chat", "embeddings"}
        s.process.kill()  # no chance to stop them
        deadline = time.monotonic() + 5
        for engine in engines.values():
            while engine.is_running() and engine.status() != psutil.STATUS_ZOMBIE:  # dead, if not yet reaped
                assert time.monotonic() < deadline, "llama-server outlived awq2gguf-serve"
                time.sleep(0.05)


@pytest.mark.parametrize("role, name", [("chat", "llama-server"), ("embeddings", "llama-server for embeddings")])
def test_an_engine_that_exits_stops_the_server_with_its_reason(smollm2_q4_0, role, name):
    with served(smollm2_q4_0, "patched", 2) as s:
        _engines(s.process)[role].kill()
        assert s.process.wait(timeout=30) == 1
        assert f"Error: {name} (patched build) failed (-9):" in s.output()
        assert "Traceback" not in s.output()


def test_without_embeddings_the_route_says_so(keyed_server):
    r = httpx.post(f"{keyed_server}/v1/embeddings", json={"input": "Hi"}, headers={"Authorization": f"Bearer {KEY}"})
    assert r.status_code == 404 and r.json()["error"]["message"] == (
        "this server serves no embeddings (it was started with --no-embeddings or --rpc)")
    schema = httpx.get(f"{keyed_server}/openapi.json", headers={"Authorization": f"Bearer {KEY}"}).json()
    assert "/v1/embeddings" not in schema["paths"]


def test_the_api_key_is_required_when_set(keyed_server):
    with pytest.raises(openai.AuthenticationError):
        client(keyed_server, "wrong").completions.create(model=CLIENT_ALIAS, prompt="Hello", max_tokens=4)
    assert client(keyed_server, KEY).completions.create(model=CLIENT_ALIAS, prompt="Hello", max_tokens=4).choices[0].text


def test_a_full_queue_answers_503_and_then_serves_again(keyed_server):
    api = client(keyed_server, KEY)
    stream = api.completions.create(model=CLIENT_ALIAS, prompt="Once upon a time", max_tokens=64, stream=True)
    first = next(iter(stream))  # the request is running
    with pytest.raises(openai.InternalServerError) as busy:
        api.completions.create(model=CLIENT_ALIAS, prompt="Hello", max_tokens=4)
    assert busy.value.status_code == 503 and "queue of 1" in str(busy.value)
    assert busy.value.response.headers["retry-after"] == "1"
    assert first.choices[0].text is not None and len(list(stream)) > 0
    assert api.completions.create(model=CLIENT_ALIAS, prompt="Hello", max_tokens=4).choices[0].text


def test_cli_refuses_to_expose_the_server_without_a_key(smollm2_q4_0, tmp_path):
    result = CliRunner().invoke(serve_main, [str(smollm2_q4_0), "--host", "0.0.0.0"], env={"AWQ2GGUF_API_KEY": ""})
    assert result.exit_code == 2 and "--host 0.0.0.0 exposes the server beyond this machine" in result.output
    not_gguf = tmp_path / "model.gguf"
    not_gguf.write_text("hello")
    result = CliRunner().invoke(serve_main, [str(not_gguf)])
    assert result.exit_code == 2 and "is not a GGUF file" in result.output
    result = CliRunner().invoke(serve_main, [str(smollm2_q4_0), "--parallel", "8", "--queue", "4"])
    assert result.exit_code == 2 and "--parallel 8 is more than --queue 4" in result.output
    result = CliRunner().invoke(serve_main, [str(smollm2_q4_0), "--embeddings", "--rpc", "127.0.0.1:1"])
    assert result.exit_code == 2 and "--embeddings cannot go with --rpc" in result.output


def test_a_model_llama_server_cannot_load_gets_one_message(tmp_path):
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + bytes(60))
    result = CliRunner().invoke(serve_main, [str(broken), "--port", "0"])
    assert result.exit_code == 1 and result.output.startswith("Error: llama-server (patched build) on broken.gguf failed")


def test_provenance_lists_the_awq2gguf_metadata(tmp_path):
    from gguf import GGUFWriter

    from awq2gguf.metadata import provenance

    path = tmp_path / "m.gguf"
    w = GGUFWriter(str(path), "llama")
    w.add_string(Key.CALIBRATION_SOURCE.gguf, "generated:seed=0,prompts=20")
    w.add_float32(Key.CHECK_KLD.gguf, 0.25)
    w.add_string("general.name", "not ours")
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.close()
    assert provenance(path) == [(Key.CALIBRATION_SOURCE, "generated:seed=0,prompts=20"), (Key.CHECK_KLD, "0.25")]


def _browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    browser, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if not (browser and driver):
        pytest.fail("the chat page test needs a headless Chromium: apt-get install chromium chromium-driver")
    opts = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1200,900"):
        opts.add_argument(arg)
    opts.binary_location = browser
    return webdriver.Chrome(options=opts, service=Service(driver))


def test_chat_page_streams_an_answer_and_shows_its_speed(server, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import WebDriverWait

    page = _browser()
    try:
        page.get(server)  # redirects to the page
        box = WebDriverWait(page, 60).until(lambda p: p.find_element(By.CSS_SELECTOR, "textarea"))
        # A long answer: a short one (19 tokens at 84 t/s on a Zen 5) can finish between two looks.
        box.send_keys("Write a long story about the sea, in at least ten sentences.", Keys.ENTER)
        seen, deadline = [], time.monotonic() + 120
        while time.monotonic() < deadline:
            answers = page.find_elements(By.CSS_SELECTOR, "[data-testid='bot']")
            speed = page.find_element(By.ID, "speed").text
            seen.append((answers[-1].text if answers else "", speed))
            if "t/s" in speed:
                break
            time.sleep(0.05)
        page.save_screenshot(str(tmp_path / "chat-page.png"))
        answer, speed = seen[-1]
        assert "t/s" in speed and "prefill" in speed and "decode" in speed, seen[-5:]
        assert len(answer.split()) > 5
        # Streamed: part of the answer was on the page before it was finished.
        assert any(0 < len(text) < len(answer) for text, s in seen if "t/s" not in s), seen
        assert "not made by awq2gguf" in page.page_source  # the plain all-Q4_0 file has no provenance
    finally:
        page.quit()


def _greedy_logprobs(url) -> list[list[tuple[str, float]]]:
    """Each of three prompts' greedy answer as (token, log-probability) pairs: equal only where every
    logit is computed in the same order."""
    answers = []
    for p in PROMPTS[:3]:
        choice = client(url).chat.completions.create(model=CLIENT_ALIAS, messages=[{"role": "user", "content": p}],
                                                     max_tokens=12, temperature=0, logprobs=True).choices[0]
        answers.append([(t.token, t.logprob) for t in choice.logprobs.content])
    return answers


@pytest.mark.parametrize("kind", ["f16", "q4_0"])
def test_layers_split_over_two_rpc_servers_give_the_local_logits(tiny_f16, tiny_q4_0, builds, kind):
    """The rpc-servers hold layers and compute them as the local CPU does: F16 on the same kernels,
    Q4_0 repacked on their side (GGML_RPC_NO_REPACK=1 keeps it as sent: ggml's plain kernels, which
    sum in another order)."""
    model = tiny_f16["tiny-tied"] if kind == "f16" else tiny_q4_0["tiny-tied", "patched"]
    with served(model, "patched", 2) as local:
        alone = _greedy_logprobs(local.url)
    with rpc_servers(builds["patched"], 2) as (servers, procs):
        started = [psutil.Process(p.pid).memory_info().rss for p in procs]
        with served(model, "patched", 2, "--rpc", ",".join(servers)) as split:
            assert _greedy_logprobs(split.url) == alone
            grown = [psutil.Process(p.pid).memory_info().rss - rss for p, rss in zip(procs, started)]
            assert min(grown) > 4 << 20, grown  # each holds layers (weights, KV cache, compute buffers)
    if kind == "q4_0":
        with rpc_servers(builds["patched"], 2, {"GGML_RPC_NO_REPACK": "1"}) as (servers, _), \
                served(model, "patched", 2, "--rpc", ",".join(servers)) as plain:
            assert _greedy_logprobs(plain.url) != alone
    assert len({tuple(a) for a in alone}) == 3


def test_a_lost_rpc_server_gets_503_and_the_server_exits_saying_why(tiny_f16, two_rpc_servers):
    servers, procs = two_rpc_servers
    with served(tiny_f16["tiny-tied"], "patched", 2, "--rpc", ",".join(servers)) as split:
        procs[1].kill()
        with pytest.raises(openai.InternalServerError) as refused:
            client(split.url).completions.create(model=CLIENT_ALIAS, prompt=PROMPTS[0], max_tokens=16)
        assert refused.value.status_code == 503
        assert split.process.wait(timeout=30) == 1
        assert "Remote RPC server crashed" in split.output()
        assert "Traceback" not in split.output()


def test_an_unreachable_rpc_server_gets_one_line(smollm2_q4_0):
    port = free_port()
    result = CliRunner().invoke(serve_main, [str(smollm2_q4_0), "--rpc", f"{LOOPBACK}:{port}"])
    assert result.exit_code == 1
    assert result.output == f"Error: cannot reach the ggml-rpc-server at {LOOPBACK}:{port}: [Errno 111] Connection refused\n"
