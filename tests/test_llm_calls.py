"""Record and replay of the explorer's LLM calls (`core.llm_calls`), with a small scripted model: the fast unit
tests. The same path against a real server (`transformers serve`): tests/test_real_server.py."""

from dataclasses import asdict

import pytest

from coevolve_lib.core.config import ConfigError, RunError
from coevolve_lib.core.llm_calls import (
    MAX_ERROR_SHARE,
    RECORD_NAME,
    RecordedChatModel,
    commit_recording,
    explorer_model,
    llm_scope,
    record_path,
    recording_report,
    request_key,
)
from coevolve_lib.core.models import ChatModel, Generation, GenerationConfig
from coevolve_lib.core.records import write_json_atomic
from coevolve_lib.profiles import run_config
from coevolve_lib.studies.run import run_hash
from coevolve_lib.training.checkpoints import as_json, check_run_folder


class Counting(ChatModel):
    """Replies with the ask's last message and how many times this model has been asked: a repeated ask gets
    another reply, as a sampled one would."""

    name, native_tools = "counting", False

    def __init__(self):
        self.asks = 0

    def generate(self, conversations, tools=None, config=GenerationConfig()):
        out = []
        for messages in conversations:
            self.asks += 1
            out.append(Generation(text=f"{messages[-1]['content']} #{self.asks}", tool_calls=None, prompt_tokens=7,
                                  completion_tokens=self.asks, seconds=0.25, finish_reason="stop"))
        return out


def ask(*contents: str) -> list[list[dict]]:
    return [[{"role": "user", "content": content}] for content in contents]


def test_a_replay_gives_every_ask_its_recorded_reply_in_order_with_no_live_model(tmp_path):
    path, live = tmp_path / RECORD_NAME, Counting()
    recording = RecordedChatModel("counting", path, live)
    first = recording.generate(ask("a", "b", "a"))
    second = recording.generate(ask("a"))  # the third ask of "a": a reply of its own
    assert [g.text for g in first + second] == ["a #1", "b #2", "a #3", "a #4"] and live.asks == 4
    replay = RecordedChatModel("counting", path)
    again = replay.generate(ask("a", "b", "a")) + replay.generate(ask("a"))
    assert again == first + second  # text, token counts, seconds and finish reason, field by field
    assert replay.recorded == 4 and len(path.read_text().splitlines()) == 4


def test_an_ask_the_recording_never_saw_is_one_line_naming_it_and_the_file(tmp_path):
    path = tmp_path / RECORD_NAME
    RecordedChatModel("counting", path, Counting()).generate(ask("a"))
    replay = RecordedChatModel("counting", path)
    replay.generate(ask("a"))
    with pytest.raises(RunError) as error:
        replay.generate(ask("explore the file system"))
    message = str(error.value)
    assert "\n" not in message and "scope ''" in message and "n 0" in message
    assert "'explore the file system'" in message
    assert RECORD_NAME in message and "1 recorded replies" in message and "llm_calls=record" in message
    with pytest.raises(RunError, match="no recording at"):
        explorer_model("counting", "replay", tmp_path / "missing.jsonl", lambda spec: Counting())


def test_the_key_is_the_model_the_messages_the_tools_and_the_sampling():
    messages, config = ask("a")[0], GenerationConfig(max_new_tokens=8)
    key = request_key("m", messages, None, config)
    assert key == request_key("m", [dict(messages[0])], None, GenerationConfig(max_new_tokens=8))
    others = [request_key("n", messages, None, config), request_key("m", ask("b")[0], None, config),
              request_key("m", messages, [{"type": "function", "function": {"name": "ls"}}], config),
              request_key("m", messages, None, GenerationConfig(max_new_tokens=8, temperature=0.5)),
              request_key("m", messages, None, GenerationConfig(max_new_tokens=8, seed=1))]
    assert len({key, *others}) == 6


def test_record_mode_resumes_a_killed_run_without_asking_twice(tmp_path):
    path = tmp_path / RECORD_NAME
    RecordedChatModel("counting", path, Counting()).generate(ask("a", "b"))
    with open(path, "a") as f:  # the run was killed while writing a third reply
        f.write('{"key": "')
    live = Counting()
    resumed = RecordedChatModel("counting", path, live)
    replies = resumed.generate(ask("a", "b", "c"))
    assert live.asks == 1 and [g.text for g in replies] == ["a #1", "b #2", "c #1"]
    assert [g.text for g in RecordedChatModel("counting", path).generate(ask("a", "b", "c"))] == \
        ["a #1", "b #2", "c #1"]


def test_each_process_of_a_multi_process_run_has_a_record_of_its_own(tmp_path, monkeypatch):
    assert record_path(tmp_path, None) == tmp_path / RECORD_NAME
    monkeypatch.setenv("RANK", "2")
    assert record_path(tmp_path, None) == tmp_path / "llm_calls.rank2.jsonl"
    assert record_path(tmp_path, str(tmp_path / "explorer.jsonl")) == tmp_path / "explorer.rank2.jsonl"


def test_recorded_and_replayed_runs_are_one_run(tmp_path):
    llm = ["data_engine.explorer_model=openai:explorer", "data_engine.explore.explorer=llm"]
    runs = [run_config("tiny", [*llm, f"data_engine.llm_calls={mode}"]) for mode in ("live", "record", "replay")]
    assert len({run_hash(run) for run in runs}) == 1
    assert run_hash(run_config("tiny", [*llm, "data_engine.llm_record=elsewhere.jsonl"])) == run_hash(runs[0])
    write_json_atomic(tmp_path / "run_config.json", {"config": as_json(asdict(runs[1]))})  # as `train` writes it
    check_run_folder(runs[2], tmp_path)  # the replay may run in the recorded run's folder
    with pytest.raises(ConfigError, match="another configuration"):
        check_run_folder(run_config("tiny", [*llm, "training.seed=5"]), tmp_path)
    with pytest.raises(ConfigError, match="explorer_model is unset"):
        run_config("tiny", ["data_engine.llm_calls=record"])


def test_a_recorded_model_error_replays_as_one_and_is_asked_again_when_recording(tmp_path):
    class DownThenUp(Counting):
        def generate(self, conversations, tools=None, config=GenerationConfig()):
            if self.asks == 0:  # the endpoint is down for the first batch
                self.asks += len(conversations)
                return [Generation("", None, 0, 0, 0.5, "error", error="APIConnectionError") for _ in conversations]
            return super().generate(conversations, tools, config)

    path, live = tmp_path / RECORD_NAME, DownThenUp()
    [failed] = RecordedChatModel("counting", path, live).generate(ask("a"))
    assert failed.error == "APIConnectionError"
    [replayed] = RecordedChatModel("counting", path).generate(ask("a"))
    assert replayed == failed  # a replay is the run as it went, its errors included
    [answered] = RecordedChatModel("counting", path, live).generate(ask("a"))  # the rerun that records asks again
    assert answered.error is None and answered.text == "a #2"
    assert RecordedChatModel("counting", path).generate(ask("a")) == [answered]  # the new line replaced the error


class FailsEvery(Counting):
    """An endpoint whose every `period`-th ask fails (what a server that answers some replies with HTTP 500 gives)."""

    def __init__(self, period: int):
        super().__init__()
        self.period = period

    def generate(self, conversations, tools=None, config=GenerationConfig()):
        out = super().generate(conversations, tools, config)
        return [Generation("", None, 0, 0, 0.1, "error", error="InternalServerError: Error code: 500")
                if (self.asks - len(out) + i + 1) % self.period == 0 else g for i, g in enumerate(out)]


def test_a_recording_of_mostly_errors_is_not_committed_and_one_within_the_bound_is(tmp_path):
    """`record-explorer` commits a new recording only when at most 5% of its asks are model errors (the first Table 12
    recording held 210 HTTP 500s in 218 asks); an ask whose error a later line replaced counts as answered."""
    committed = tmp_path / "explorer.jsonl"
    committed.write_text("the committed recording\n")
    bad, good = tmp_path / "bad.partial.jsonl", tmp_path / "good.partial.jsonl"
    RecordedChatModel("counting", bad, FailsEvery(4)).generate(ask(*"abcdefgh"))  # 2 errors in 8 asks: 25%
    assert recording_report(bad) | {"path": None} == {
        "path": None, "asks": 8, "errors": 2, "error_share": 0.25, "over_bound": True,
        "frequent_errors": {"InternalServerError: Error code: 500": 2}}
    with pytest.raises(RunError, match=r"2 of 8 recorded asks are model errors \(25.0%, over the 5% bound\)"):
        commit_recording(bad, committed)
    assert committed.read_text() == "the committed recording\n" and bad.exists()
    # the same asks recorded again: the errors are asked anew and answered, their new lines replace them
    RecordedChatModel("counting", bad, Counting()).generate(ask(*"abcdefgh"))
    assert recording_report(bad)["errors"] == 0 and len(bad.read_text().splitlines()) == 10
    assert commit_recording(bad, committed)["asks"] == 8 and not bad.exists()
    assert len(committed.read_text().splitlines()) == 10
    # the bound itself: one error in 20 asks is 5%, committed
    RecordedChatModel("counting", good, FailsEvery(20)).generate(ask(*"abcdefghijklmnopqrst"))
    assert recording_report(good)["error_share"] == MAX_ERROR_SHARE and commit_recording(good, committed)


def test_asks_are_numbered_within_their_unit_of_work_so_a_resumed_round_finds_its_replies(tmp_path):
    """Two targets of a round ask the same prompt; the run is killed after the first, and the resumed run redoes only
    the second: in its scope the ask is number 0 again, and it gets the second target's recorded reply."""
    path, live = tmp_path / RECORD_NAME, Counting()
    recording = RecordedChatModel("counting", path, live)
    for target in ("t1", "t2"):
        with llm_scope(recording, f"round 0/explore/{target}"):
            recording.generate(ask("a", "a"))  # two runs of the target ask the same first prompt
    resumed = RecordedChatModel("counting", path)
    with llm_scope(resumed, "round 0/explore/t2"):
        assert [g.text for g in resumed.generate(ask("a", "a"))] == ["a #3", "a #4"]
    assert resumed.scope == "" and live.asks == 4
    with llm_scope(Counting(), "ignored"):  # any other model: nothing to number
        pass


def test_a_recording_runs_summary_says_how_many_of_its_asks_failed(tmp_path):
    """`data_engine.llm_calls=record`: the run's summary reports its recording (asks, model errors, their share, and
    whether that is over the 5% bound), read back from the recording the run config names."""
    from coevolve_lib.training.summary import summarize

    record = tmp_path / "calls.jsonl"
    RecordedChatModel("counting", record, FailsEvery(2)).generate(ask(*"abcd"))
    training = {"seed": 0, "max_steps": 1, "tasks_per_step": 1, "group_size": 2, "learning_rate": 1e-6,
                "feedback_every": 1, "pool_updates": "signals"}
    write_json_atomic(tmp_path / "run_config.json", {
        "profile": "tiny", "model": "tiny", "training": training,
        "config": {"data_engine": {"llm_calls": "record", "llm_record": str(record)}}})
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "pool/size": 3}\n')
    report = summarize(tmp_path)["llm_calls"]
    assert (report["asks"], report["errors"], report["error_share"], report["over_bound"]) == (4, 2, 0.5, True)
