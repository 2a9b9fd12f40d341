"""awq2gguf-serve's OpenAI features as the official client sends them (tools, JSON schemas, logprobs,
stop, seed, usage) on both builds, its metrics, the prompt cache and speculative decoding."""

import codecs
import json
import this

import httpx
import jsonschema
import openai
import pytest
from conftest import SERVE_KEY as KEY, openai_client as client

from awq2gguf.assets.dev_models import f16_gguf
from awq2gguf.bench.models import quantized_by
from awq2gguf.bench.serve_prompts import SPECULATION_PROMPTS
from awq2gguf.builds import BUILD_NAMES
from awq2gguf.serve.process import CLIENT_ALIAS, served

@pytest.fixture(scope="module")
def coder_q4_0(builds):
    """Qwen2.5-Coder-0.5B-Instruct in all-Q4_0: a chat template that takes tools."""
    return quantized_by(builds["patched"], f16_gguf("qwen-coder"), "Q4_0")


@pytest.fixture(scope="module", params=BUILD_NAMES)
def coder_server(request, coder_q4_0):
    with served(coder_q4_0, request.param, 2, "--ctx", "2048", "--max-tokens", "128", "--no-page") as s:
        yield s.url


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The time in a city now",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
# A 0.5B model seldom starts a call by itself (it writes the JSON in a code block): the assistant's
# turn is begun with the template's tag, which llama-server continues.
CALL_BEGUN = {"role": "assistant", "content": "<tool_call>\n"}


@pytest.mark.parametrize("choice", ["required", {"type": "function", "function": {"name": "get_weather"}}],
                         ids=["required", "named"])
def test_a_tool_call_comes_back_parsed_and_its_result_is_answered(coder_server, choice):
    api = client(coder_server)
    question = {"role": "user", "content": "What is the weather like in Paris?"}
    first = api.chat.completions.create(model=CLIENT_ALIAS, messages=[question, CALL_BEGUN], tools=[TIME, WEATHER],
                                        tool_choice=choice, parallel_tool_calls=False, max_tokens=64,
                                        temperature=0).choices[0]
    assert first.finish_reason == "tool_calls"
    call, = first.message.tool_calls
    if isinstance(choice, dict):
        assert call.function.name == "get_weather"
    assert call.function.name in {"get_weather", "get_time"}
    assert json.loads(call.function.arguments) == {"city": "Paris"}

    answer = api.chat.completions.create(model=CLIENT_ALIAS, tools=[TIME, WEATHER], max_tokens=32, temperature=0, messages=[
        question, {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 24 C"}]).choices[0].message
    assert not answer.tool_calls and "24" in answer.content


def test_a_named_tool_that_is_not_among_the_tools_gets_400(coder_server):
    with pytest.raises(openai.BadRequestError, match="tool_choice names 'get_time', which is not among the tools"):
        client(coder_server).chat.completions.create(
            model=CLIENT_ALIAS, messages=[{"role": "user", "content": "Hi"}], tools=[WEATHER],
            tool_choice={"type": "function", "function": {"name": "get_time"}})


# Keywords llama-server's grammar enforces (it leaves a number's bounds unchecked; an integer's it keeps).
CITY = {"type": "object", "additionalProperties": False, "required": ["city", "country", "population_millions"],
        "properties": {"city": {"type": "string", "maxLength": 40}, "country": {"type": "string", "maxLength": 40},
                       "population_millions": {"type": "integer", "minimum": 0, "maximum": 100}}}


def test_a_json_schema_answer_parses_and_validates(coder_server):
    answer = client(coder_server).chat.completions.create(
        model=CLIENT_ALIAS, messages=[{"role": "user", "content": "Describe the capital of France."}], temperature=0,
        response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": CITY}}).choices[0]
    assert answer.finish_reason == "stop"
    jsonschema.validate(json.loads(answer.message.content), CITY)


def test_logprobs_are_the_answer_tokens_with_their_likeliest_alternatives(coder_server):
    answer = client(coder_server).chat.completions.create(
        model=CLIENT_ALIAS, messages=[{"role": "user", "content": "Name a colour."}], max_tokens=8, temperature=0,
        logprobs=True, top_logprobs=3)
    steps = answer.choices[0].logprobs.content
    assert len(steps) == answer.usage.completion_tokens
    assert "".join(s.token for s in steps) == answer.choices[0].message.content
    for step in steps:
        top = [t.logprob for t in step.top_logprobs]
        assert len(top) == 3 and top == sorted(top, reverse=True) and top[0] <= 0
        assert step.top_logprobs[0].token == step.token  # greedy: the likeliest token is the one taken


def test_logprobs_on_completions_get_400_saying_where_they_are_served(coder_server):
    with pytest.raises(openai.BadRequestError, match="logprobs are served on /v1/chat/completions"):
        client(coder_server).completions.create(model=CLIENT_ALIAS, prompt="Hello", max_tokens=4, logprobs=2)


def test_stop_seed_and_usage(coder_server):
    api = client(coder_server)
    whole = api.completions.create(model=CLIENT_ALIAS, prompt="Count: 1, 2, 3,", max_tokens=16, temperature=0)
    stopped = api.completions.create(model=CLIENT_ALIAS, prompt="Count: 1, 2, 3,", max_tokens=16, temperature=0, stop=[" 6"])
    assert " 6" in whole.choices[0].text and " 6" not in stopped.choices[0].text
    assert whole.choices[0].text.startswith(stopped.choices[0].text) and stopped.choices[0].finish_reason == "stop"

    sampled = [api.completions.create(model=CLIENT_ALIAS, prompt="A story:", max_tokens=24, temperature=1.0, seed=seed)
               .choices[0].text for seed in (7, 7, 8)]
    assert sampled[0] == sampled[1] != sampled[2]

    messages = [{"role": "user", "content": "Say hello."}]
    usage = api.chat.completions.create(model=CLIENT_ALIAS, messages=messages, max_tokens=8, temperature=0).usage
    chunks = list(api.chat.completions.create(model=CLIENT_ALIAS, messages=messages, max_tokens=8, temperature=0, stream=True,
                                              stream_options={"include_usage": True}))
    assert chunks[-1].usage.prompt_tokens == usage.prompt_tokens > 5
    assert chunks[-1].usage.completion_tokens == usage.completion_tokens
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens


def test_tools_for_a_template_without_them_get_400(smollm2_q4_0):
    with served(smollm2_q4_0, "patched", 2, "--no-page") as s:
        with pytest.raises(openai.BadRequestError, match="this model's chat template takes no tools"):
            client(s.url).chat.completions.create(model=CLIENT_ALIAS, messages=[{"role": "user", "content": "Hi"}],
                                                  tools=[WEATHER])


def test_metrics_are_llama_servers_and_the_fronts_behind_the_key(smollm2_q4_0):
    with served(smollm2_q4_0, "patched", 2, "--no-page", "--queue", "1", "--parallel", "1", api_key=KEY) as s:
        assert httpx.get(f"{s.url}/metrics").status_code == 401
        client(s.url, KEY).completions.create(model=CLIENT_ALIAS, prompt="Hello", max_tokens=3)
        with pytest.raises(openai.AuthenticationError):
            client(s.url, "wrong").completions.create(model=CLIENT_ALIAS, prompt="Hello", max_tokens=3)
        text = httpx.get(f"{s.url}/metrics", headers={"Authorization": f"Bearer {KEY}"}).text
    values = {line.split()[0]: float(line.split()[1]) for line in text.splitlines() if line and line[0] != "#"}
    assert values["llamacpp:tokens_predicted_total"] == 3
    assert values['awq2gguf_responses_total{route="/v1/completions",status="200"}'] == 1
    assert values['awq2gguf_responses_total{route="/v1/completions",status="401"}'] == 1
    assert values['awq2gguf_responses_total{route="/metrics",status="401"}'] == 1
    assert values["awq2gguf_key_failures_total"] == 2
    assert values["awq2gguf_queue_size"] == 1 and values["awq2gguf_requests_in_flight"] == 0


def _turn(api, messages) -> tuple[str, dict]:
    """A greedy answer and llama-server's timings of it (prompt tokens evaluated and restored)."""
    r = api.chat.completions.with_raw_response.create(model=CLIENT_ALIAS, messages=messages, max_tokens=24, temperature=0)
    return r.parse().choices[0].message.content, r.http_response.json()["timings"]


@pytest.mark.parametrize("cache_mib", [256, 0])
def test_a_chats_second_turn_restores_its_first_from_the_prompt_cache(smollm2_q4_0, cache_mib):
    """One slot, two chats: chat B's turn takes the slot between chat A's two turns, so A's second
    turn finds its history only in the prompt cache."""
    long_question = "Here is my plan for a garden: " + "roses, tulips, lavender and a small pond; " * 20
    with served(smollm2_q4_0, "patched", 2, "--no-page", "--parallel", "1", "--prompt-cache", str(cache_mib)) as s:
        api = client(s.url)
        chat_a = [{"role": "user", "content": long_question + "What do you think?"}]
        answer, first = _turn(api, chat_a)
        _turn(api, [{"role": "user", "content": "Tell me a joke about cats."}])
        _, second = _turn(api, chat_a + [{"role": "assistant", "content": answer},
                                         {"role": "user", "content": "What should I plant first?"}])
    assert first["prompt_n"] > 200
    if cache_mib:
        assert second["cache_n"] >= first["prompt_n"] and second["prompt_n"] < 40
    else:
        # only the chat template's opening, shared with chat B, is reused
        assert second["cache_n"] < 50 and second["prompt_n"] > first["prompt_n"]


# Long enough that the answers run past 512 cells of KV cache, where a lone token's attention takes
# another path than a batch's.
SYSTEM = {"role": "system", "content": "Follow these principles when you write code.\n" + codecs.decode(this.s, "rot13") * 2}


def _greedy_answers(url, max_tokens=160) -> list[tuple[str, dict]]:
    api = client(url)
    out = []
    for text in SPECULATION_PROMPTS["code edits"][:2] + SPECULATION_PROMPTS["questions"][:1]:
        r = api.chat.completions.with_raw_response.create(
            model=CLIENT_ALIAS, messages=[SYSTEM, {"role": "user", "content": text}], max_tokens=max_tokens, temperature=0)
        out.append((r.parse().choices[0].message.content, r.http_response.json()["timings"]))
    return out


@pytest.mark.slow
def test_speculation_gives_the_greedy_answers_without_it(coder_q4_0):
    """n-gram drafts and a draft model (here the model itself: every draft right) verified in
    batches: the patched build's answers are those of one token at a time (patch 0023)."""
    with served(coder_q4_0, "patched", 2, "--no-page") as s:
        plain = _greedy_answers(s.url)
    for spec in (["--spec", "ngram"], ["--draft", str(coder_q4_0)]):
        with served(coder_q4_0, "patched", 2, "--no-page", *spec) as s:
            drafted = _greedy_answers(s.url)
        assert [a for a, _ in drafted] == [a for a, _ in plain], spec
        assert sum(t.get("draft_n_accepted", 0) for _, t in drafted) > 50, spec
    assert all(t["cache_n"] + t["prompt_n"] + t["predicted_n"] > 512 for _, t in plain)
