"""OpenAIChatModel against the kit's real loopback server (serving the tiny model), with injected faults."""

import re
import subprocess
import sys

import pytest

from coevolve_lib.cli.openai_server import ChatServer, FaultConfig, parse_tool_calls
from coevolve_lib.core.model_specs import load_chat_model
from coevolve_lib.core.models import ChatModel, GenerationConfig
from coevolve_lib.core.openai_model import OpenAIChatModel, _parse_arguments
from coevolve_lib.core.paths import REPO_ROOT
from coevolve_lib.envs.bfcl.tiny_model import build_tiny

HI = [{"role": "user", "content": "Go to the folder x."}]
SHORT = GenerationConfig(max_new_tokens=6)
CD_TOOL = {"type": "function", "function": {
    "name": "cd", "description": "Change directory.",
    "parameters": {"type": "object", "properties": {"folder": {"type": "string"}}, "required": ["folder"]}}}


@pytest.fixture(scope="module")
def tiny():
    build_tiny()  # no-op when `make setup` already built it
    return load_chat_model("tiny")


def client(server, **options):
    # Short backoff so retry tests stay fast; a 0.5 s timeout so the "timeout" fault (1.5 s) trips it.
    return OpenAIChatModel("tiny", base_url=server.base_url, timeout=options.pop("timeout", 0.5),
                           backoff_s=0.01, **options)


def test_round_trip_serves_the_real_model(tiny):
    with ChatServer(tiny) as server:
        model = client(server, timeout=10)
        [generation] = model.generate([HI], config=SHORT)
        assert [m.id for m in model.client.models.list().data] == ["tiny"]
    [direct] = tiny.generate([HI], config=SHORT)
    assert generation.error is None and generation.finish_reason == direct.finish_reason
    assert generation.text == direct.text  # greedy: the server answers exactly what the model generates
    assert (generation.prompt_tokens, generation.completion_tokens) == (direct.prompt_tokens, direct.completion_tokens)
    assert model.num_retries == 0 and server.num_requests == 1


def test_tools_and_tool_history_reach_the_model(tiny):
    history = HI + [
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "cd", "arguments": {"folder": "x"}}}]},  # no id, dict args
        {"role": "tool", "content": '{"current_working_directory": "x"}'},
    ]
    with ChatServer(tiny) as server:
        model = client(server, timeout=10)
        plain, with_tools, with_history = model.generate([HI, HI, history], [None, [CD_TOOL], [CD_TOOL]], SHORT)
    assert with_history.error is None
    assert with_tools.prompt_tokens > plain.prompt_tokens  # the tool docs were rendered into the prompt
    assert with_history.prompt_tokens > with_tools.prompt_tokens


@pytest.mark.parametrize("faults", [["500", "500"], ["timeout"], ["malformed"], ["500", "timeout", "malformed"],
                                    ["bad_usage"]])
def test_retries_through_faults(tiny, faults):
    with ChatServer(tiny, faults=FaultConfig(faults=faults, delay_s=1.5)) as server:
        model = client(server, max_retries=len(faults))
        [generation] = model.generate([HI], config=SHORT)
    assert generation.error is None and generation.finish_reason in ("stop", "length")
    assert generation.completion_tokens > 0
    assert model.num_retries == len(faults) and server.num_requests == len(faults) + 1


@pytest.mark.parametrize("fault", ["500", "malformed", "timeout", "bad_usage"])
def test_persistent_faults_give_an_error_not_an_exception(tiny, fault):
    """Issue 29: an HTTP 200 whose `usage` is no object was an AttributeError out of the batch; now, as any
    malformed response, it is retried, then the item's error."""
    with ChatServer(tiny, faults=FaultConfig(always=fault, delay_s=1.5)) as server:
        model = client(server, max_retries=1)
        out = model.generate([HI, HI], config=SHORT)
    assert [g.finish_reason for g in out] == ["error", "error"]
    assert all(g.error and g.text == "" and g.tool_calls is None for g in out)
    assert model.num_retries == 2 and server.num_requests == 4  # 2 items x (1 try + 1 retry)


def test_a_request_waiting_out_a_timeout_fault_does_not_generate_once_the_server_closed(tiny):
    """A closed server's request that still sleeps out a "timeout" fault answers without the model: such a request
    (a 20 s fault) once generated in CI after its test had ended, beside a later test's seeded sampling."""
    import time

    generated = []

    class Counting(ChatModel):
        name, native_tools = tiny.name, tiny.native_tools

        def generate(self, conversations, tools=None, config=GenerationConfig()):
            generated.append(len(conversations))
            return tiny.generate(conversations, tools, config)

    with ChatServer(Counting(), faults=FaultConfig(always="timeout", delay_s=1.0)) as server:
        [generation] = client(server, max_retries=0, timeout=0.2).generate([HI], config=SHORT)
    time.sleep(1.5)  # past the fault's delay
    assert generation.finish_reason == "error" and server.num_requests == 1
    assert generated == []


def test_client_errors_are_not_retried(tiny):
    with ChatServer(tiny) as server:
        model = OpenAIChatModel("not-served", base_url=server.base_url, timeout=5, max_retries=3, backoff_s=0.01)
        [generation] = model.generate([HI], config=SHORT)
    assert generation.finish_reason == "error" and "404" in generation.error
    assert model.num_retries == 0 and server.num_requests == 1


def test_tool_calls_come_back_structured(tiny):
    reply = ('Going there. <tool_call>\n{"name": "cd", "arguments": {"folder": "x"}}\n</tool_call>\n'
             '<tool_call>\n{"name": "ls", "arguments": {}}\n</tool_call>')
    with ChatServer(tiny, faults=FaultConfig(scripted_reply=reply)) as server:
        [generation] = client(server, timeout=10).generate([HI], [[CD_TOOL]], SHORT)
    assert generation.text == "Going there."
    ids = [call.pop("id") for call in generation.tool_calls]  # the endpoint's own, answered by the tool messages
    assert generation.tool_calls == [{"name": "cd", "arguments": {"folder": "x"}}, {"name": "ls", "arguments": {}}]
    assert len(set(ids)) == 2 and all(i.startswith("call_") for i in ids)


def test_malformed_tool_call_stays_text(tiny):
    reply = '<tool_call>\n{"name": "cd", "arguments": {"folder": }\n</tool_call>'
    with ChatServer(tiny, faults=FaultConfig(scripted_reply=reply)) as server:
        [generation] = client(server, timeout=10).generate([HI], [[CD_TOOL]], SHORT)
    assert generation.tool_calls is None and generation.text == reply


def test_tool_call_parsing_helpers():
    assert parse_tool_calls("no calls") == ("no calls", [])
    assert parse_tool_calls('<tool_call>["cd"]</tool_call>') == ('<tool_call>["cd"]</tool_call>', [])
    assert parse_tool_calls('<tool_call>{"name": "ls"}</tool_call>') == (None, [{"name": "ls"}])
    # JSON that json.loads refuses with a RecursionError or a ValueError other than JSONDecodeError: text, not a 500
    for body in ["[" * 1000 + "]" * 1000, '{"name": "ls", "arguments": {"a": ' + "9" * 4301 + "}}"]:
        assert parse_tool_calls(f"<tool_call>{body}</tool_call>") == (f"<tool_call>{body}</tool_call>", [])
    assert _parse_arguments('{"folder": "x"}') == {"folder": "x"}
    assert _parse_arguments("{folder: x") == "{folder: x"  # invalid JSON is left for the caller to judge
    assert _parse_arguments('"x"') == '"x"'


def test_server_runs_as_a_module(tiny):
    process = subprocess.Popen([sys.executable, "-m", "coevolve_lib.cli.openai_server",
                                "--model", "tiny", "--port", "0"],
                               cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        line = process.stdout.readline()
        base_url = re.search(r"at (http://127\.0\.0\.1:\d+/v1)", line).group(1)
        model = OpenAIChatModel("tiny", base_url=base_url, timeout=30, max_retries=0)
        [generation] = model.generate([HI], config=SHORT)
        assert generation.error is None and generation.completion_tokens > 0
    finally:
        process.terminate()
        process.wait(timeout=10)


@pytest.mark.parametrize("reply", [
    '<tool_call>{"name": "cd", "arguments": {"folder": </tool_call>',  # not JSON: the kit parses the text, refuses it
    '<tool_call>{"name": "cd", "arguments": "nope"}</tool_call>',  # structured, refused: the endpoint gave it an id
    '<tool_call>{"name": "cd", "arguments": {"folder": "x"}}</tool_call>'
    '<tool_call>{"name": "cd", "arguments": [1]}</tool_call>',  # one accepted, one refused
])
def test_every_tool_message_answers_a_real_call_id_of_a_strict_endpoint(tiny, reply):
    """Issue 28: OpenAI's API answers 400 to a tool message whose tool_call_id is no call of the assistant turn;
    the kit's messages carry each structured call's own id, and the error for a call it refused in text (never a
    call) goes as a user message, so a whole BFCL episode runs against a strict endpoint without a model error."""
    from coevolve_lib.core.config import RolloutConfig
    from coevolve_lib.envs.bfcl.episode import Episode
    from coevolve_lib.envs.bfcl.tasks import load_tasks
    from coevolve_lib.rollout.agent import RolloutPhase, run_rollouts

    task = load_tasks("v3", "base")[0]
    with ChatServer(tiny, faults=FaultConfig(scripted_reply=reply), strict=True) as server:
        model = client(server, timeout=10, max_retries=0)
        config = RolloutPhase(RolloutConfig(tool_docs="compact", max_steps_per_episode=3), generation=SHORT)
        [record] = run_rollouts(model, [task], config, lambda t, i, tool_format, config: Episode(t, i, tool_format,
                                                                                              config), progress=False)
    assert record["terminated"] == "episode_step_cap", record["error_message"]  # not "model_error" (a 400)
    assert server.num_requests == 3 and all(step["rejected"] for step in record["steps"])
    ids = [call.get("id") for m in record["messages"] if m["role"] == "assistant" for call in m.get("tool_calls", [])]
    answered = [m.get("tool_call_id") for m in record["messages"] if m["role"] == "tool" and m.get("tool_call_id")]
    assert sorted(answered) == sorted(i for i in ids if i)


def test_the_strict_server_refuses_what_openai_refuses(tiny):
    from coevolve_lib.cli.openai_server import tool_message_problem

    call = {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "type": "function",
                                                                "function": {"name": "cd", "arguments": "{}"}}]}
    assert tool_message_problem(HI + [call, {"role": "tool", "tool_call_id": "c1", "content": "ok"}]) is None
    assert "answers no tool call" in tool_message_problem(HI + [call, {"role": "tool", "tool_call_id": "c9",
                                                                        "content": "ok"}])
    assert "have no tool message" in tool_message_problem(HI + [call, {"role": "user", "content": "next"}])
    assert "answers no tool call" in tool_message_problem(HI + [{"role": "tool", "tool_call_id": "c1", "content": ""}])


def test_a_server_that_never_answers_costs_a_bounded_wait_and_says_so(caplog, monkeypatch):
    """Issue 29: a server that accepts and never answers kept a command silent for minutes (5 tries x 120 s per
    item). The batch deadline bounds the whole batch, and a batch still waiting says what for, on stderr."""
    import socket
    import time

    from coevolve_lib.core import openai_model

    monkeypatch.setattr(openai_model, "WAIT_NOTICE_S", 0.3)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)  # accepts (the kernel's backlog) and never reads or answers
        url = f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
        model = OpenAIChatModel("silent", base_url=url, timeout=120, backoff_s=0.01, max_workers=2,
                                deadline_s=60, batch_deadline_s=1.5)
        start = time.monotonic()
        with caplog.at_level("WARNING", logger="coevolve_lib.core.openai_model"):
            generations = model.generate([HI] * 5, config=SHORT)
        seconds = time.monotonic() - start
    assert seconds < 4, seconds  # two items in flight until the batch's 1.5 s, the other three not sent
    assert all(g.finish_reason == "error" for g in generations)
    assert sum("not sent: the batch's time was up" in g.error for g in generations) == 3
    assert all("batch deadline 1.5 s" in g.error for g in generations)
    [notice] = [r.getMessage() for r in caplog.records if "waiting for" in r.getMessage()]
    assert notice == (f"waiting for 5 of 5 replies from openai:silent at {url} "
                      "(each at most 60 s, the batch at most 1.5 s)")


def test_requests_are_paced_to_the_process_share_of_the_run_rate(tiny):
    """Issue 46: every process of a run calls the explorer, so a hosted endpoint's quota is the run's, not a
    process's. `data_engine.explorer_requests_per_minute` over P processes paces each to one request every
    60 x P / rate seconds (`min_interval_s`), whatever its threads; its calls in flight are the run's
    `explorer_max_concurrent` // P (`max_workers`)."""
    import time

    from coevolve_lib.core.config import DataEngineConfig
    from coevolve_lib.engine.data_engine import explorer_options

    options = explorer_options(DataEngineConfig(explorer_max_concurrent=32, explorer_requests_per_minute=600), 8)
    assert (options["max_workers"], options["min_interval_s"]) == (4, 0.8)  # 600 a minute over 8: 75 each
    with ChatServer(tiny, faults=FaultConfig(scripted_reply="ok")) as server:
        paced = client(server, timeout=10, max_workers=6, min_interval_s=0.4)
        start = time.perf_counter()
        generations = paced.generate([HI] * 6, config=SHORT)
        seconds = time.perf_counter() - start
        assert all(g.error is None for g in generations) and server.num_requests == 6
        assert seconds >= 5 * 0.4, seconds  # six starts, 0.4 s apart, though six threads were free
        unpaced = client(server, timeout=10, max_workers=6)
        start = time.perf_counter()
        unpaced.generate([HI] * 6, config=SHORT)
        assert time.perf_counter() - start < 1.0
        late = client(server, timeout=10, max_workers=6, min_interval_s=5.0, deadline_s=2.0)
        errors = [g.error for g in late.generate([HI] * 2, config=SHORT)]
    assert errors[0] is None and "no time left to start a request at its pace" in errors[1]  # not waited for


def test_a_run_shares_its_explorer_calls_in_flight_over_its_processes():
    from coevolve_lib.core.config import ConfigError
    from coevolve_lib.profiles import run_config

    with pytest.raises(ConfigError, match="explorer_max_concurrent 4 is shared by the run's 8 processes"):
        run_config("paper-qwen3-4b", ["data_engine.explorer_max_concurrent=4"])


def test_an_endpoint_model_without_a_base_url_is_one_line_never_a_public_call(monkeypatch, capsys):
    """Issue 47: with OPENAI_BASE_URL unset the openai client went to api.openai.com, and only a "waiting for" notice
    showed it. Now one line when the model is made; the data engine makes its explorer when a round first needs it."""
    from coevolve_lib.__main__ import main as cli
    from coevolve_lib.core.config import ConfigError

    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(ConfigError, match="openai:x has no endpoint: set OPENAI_BASE_URL"):
        load_chat_model("openai:x")
    returned = cli(["evaluate", "--model", "openai:x", "--limit", "1", "--out", "/nonexistent/never.json"])
    err = capsys.readouterr().err
    assert returned == 2 and err.count("\n") == 1 and "has no endpoint" in err, err


def test_the_same_server_error_three_times_is_not_retried_again(tiny):
    """A deterministic HTTP 500 (the server cannot make a reply for this request) was retried 4 more times, 11-26 s
    per ask; the third identical error ends the tries (two, then a reply, are `test_retries_through_faults`'s)."""
    with ChatServer(tiny, faults=FaultConfig(always="500")) as server:
        model = client(server, timeout=10, max_retries=4)
        [generation] = model.generate([HI], config=SHORT)
        assert server.num_requests == 3 and model.num_retries == 2
    assert "the same server error 3 times: not retried again" in generation.error


def _slow_server(answer: bytes, pause_s: float, head: int = 0, zeros: int = 0):
    """A loopback server that reads a request and sends `answer`, its first `head` bytes at once, then one byte every
    `pause_s` seconds (0: all at once, as fast as the client reads), then `zeros` bytes of "0" in 1 MiB chunks;
    returns (base URL, stop)."""
    import socket
    import threading
    import time

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    stopped = threading.Event()

    def serve(connection):
        with connection:
            connection.recv(65536)
            try:
                connection.sendall(answer[:head])
                if not pause_s:
                    connection.sendall(answer[head:])
                for index in range(head, len(answer) if pause_s else head):
                    if stopped.wait(pause_s):
                        return
                    connection.sendall(answer[index:index + 1])
                for _ in range(zeros // 2**20):
                    connection.sendall(b"0" * 2**20)
            except OSError:
                return

    def accept():
        while not stopped.is_set():
            try:
                connection, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=serve, args=(connection,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()

    def stop():
        stopped.set()
        listener.close()
        time.sleep(0.05)

    return f"http://127.0.0.1:{listener.getsockname()[1]}/v1", stop


BODY = b'{"id": "x", "object": "chat.completion", "choices": []}' + b" " * 200
HEADERS = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"


@pytest.mark.parametrize("shape", ["trickle", "headers_then_trickle", "giant_body"])
def test_a_slow_or_huge_answer_ends_by_the_deadline_and_the_byte_bound(shape):
    """Issue 47: a server that sends one byte a second kept an evaluation waiting past 200 s with a 15 s deadline
    (the client's read timeout starts again at every byte), and a 300 MB body was read whole (960 MiB). Every read
    of a request now ends by its deadline and its answer stops at MAX_RESPONSE_BYTES."""
    import resource
    import time

    if shape == "giant_body":  # 300 MB of body, sent as fast as the client reads
        url, stop = _slow_server(HEADERS % (300 * 2**20), 0.0, zeros=300 * 2**20)
    else:
        answer = HEADERS % len(BODY) + BODY
        url, stop = _slow_server(answer, 1.0, len(HEADERS % len(BODY)) if shape == "headers_then_trickle" else 0)
    try:
        model = OpenAIChatModel("x", base_url=url, timeout=60, max_retries=0, deadline_s=3)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        start = time.perf_counter()
        [generation] = model.generate([HI], config=SHORT)
        seconds = time.perf_counter() - start
        grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    finally:
        stop()
    assert generation.finish_reason == "error" and generation.error, generation
    assert seconds < 5.5, seconds  # the 3 s deadline and one byte's pause, not the 60 s timeout per byte
    if shape == "giant_body":
        assert "over 16 MiB" in generation.error and grown_mib < 100, (generation.error, grown_mib)
    else:
        assert "Timeout" in generation.error


def test_every_tool_message_id_sent_is_unique_and_answers_its_turn():
    """Issue 47: an endpoint that repeats one id for every call got it back on every tool message (strict endpoints
    answer 400), and a giant id was kept whole. Ids are kept only when short, plain and new in their reply; the
    request makes every id unique in the conversation and points each tool message at its own turn's call."""
    from coevolve_lib.core.openai_model import _openai_messages, kept_call_ids

    assert kept_call_ids(["call_1", "call_1", "x" * 65, None, 7, "ok"]) == ["call_1", None, None, None, None, "ok"]
    turn = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": {}}},
        {"id": None, "type": "function", "function": {"name": "pwd", "arguments": {}}}]}
    answers = [{"role": "tool", "tool_call_id": "call_1", "content": "a"},
               {"role": "tool", "tool_call_id": None, "content": "b"}]
    sent = _openai_messages([{"role": "user", "content": "go"}, turn, *answers, turn, *answers])
    ids = [call["id"] for message in sent for call in message.get("tool_calls", [])]
    assert len(ids) == len(set(ids)) == 4
    for index, message in enumerate(sent):
        if message["role"] == "tool":
            owner = next(m for m in reversed(sent[:index]) if m.get("tool_calls"))
            assert message["tool_call_id"] in {call["id"] for call in owner["tool_calls"]}
    tool_ids = [m["tool_call_id"] for m in sent if m["role"] == "tool"]
    assert len(tool_ids) == len(set(tool_ids)) == 4
