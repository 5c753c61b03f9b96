"""Issue 47: every file the kit reads back is decoded and validated as data. A line cut inside a multi-byte UTF-8
character, an invalid byte, a record of the wrong shape: the same handling as a cut JSON line (an appended file's bad
line skipped with a notice; an atomically written file's bad line one line naming the file and the line), never a
traceback."""

import json
from pathlib import Path

import pytest

from coevolve_lib.__main__ import main as cli
from coevolve_lib.core.config import RunError
from coevolve_lib.core.llm_calls import RecordedChatModel
from coevolve_lib.core.records import MAX_LINE_BYTES, CorruptFileError, read_jsonl
from coevolve_lib.engine.pool import TaskPool

ROW = {"step": 1, "note": "café"}
"""A metrics-like row holding a multi-byte character."""


def test_an_appended_file_cut_inside_a_multi_byte_character_keeps_its_whole_lines(tmp_path, caplog):
    path = tmp_path / "metrics.jsonl"
    line = json.dumps(ROW, ensure_ascii=False).encode()
    cut = line[:line.index("é".encode()) + 1]  # a short write: the first of é's two bytes
    path.write_bytes(line + b"\n" + cut)
    assert read_jsonl(path) == [ROW]  # was: UnicodeDecodeError
    assert "skipping corrupt line 2" in caplog.text
    path.write_bytes(line + b"\n\xff\xfe\n" + line + b"\n")  # an invalid byte inside the file
    assert read_jsonl(path) == [ROW, ROW]


def test_a_line_over_the_bound_is_skipped_without_being_held(tmp_path, monkeypatch):
    import coevolve_lib.core.records as records

    monkeypatch.setattr(records, "MAX_LINE_BYTES", 64)
    path = tmp_path / "rollouts.jsonl"
    path.write_bytes(b'{"a": "' + b"x" * 500 + b'"}\n{"b": 1}\n')
    assert read_jsonl(path) == [{"b": 1}]
    assert MAX_LINE_BYTES == 64 * 2**20


@pytest.mark.parametrize("damage, expected", [
    (b"\xff", "pool.jsonl, line 2: not a JSON record"),  # one invalid byte
    (b"{}", "pool.jsonl, line 2: not a task/v1 record"),  # was: KeyError: 'pool_version'
    (b'{"task_id": "t", "pool_version": "0"}', "pool.jsonl, line 2: not a task/v1 record"),
])
def test_a_damaged_pool_line_is_one_line_naming_the_file_and_line(tmp_path, capsys, damage, expected):
    pool = TaskPool(tmp_path / "run" / "pool.jsonl")
    pool.add_round([{"task_id": "a", "query": "q"}], 0)
    pool.path.write_bytes(pool.path.read_bytes() + damage + b"\n")
    with pytest.raises(CorruptFileError, match=expected):
        TaskPool(pool.path)
    returned = cli(["train", "--profile", "tiny", "--quiet", "--out", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert returned == 1 and "Traceback" not in err and err.count("\n") == 1 and expected in err, err


def _recording(tmp_path, reply: dict) -> Path:
    path = tmp_path / "llm_calls.jsonl"
    line = {"schema": "llm_call/v1", "scope": "s", "key": "k", "n": 0, "model": "openai:a", "asked": "hi",
            "reply": reply}
    path.write_text(json.dumps(line, ensure_ascii=False) + "\n")
    return path


REPLY = {"text": "héllo", "tool_calls": None, "prompt_tokens": 1, "completion_tokens": 1, "seconds": 0.1,
         "finish_reason": "stop", "error": None}


def test_a_recording_line_without_a_reply_field_is_one_line(tmp_path):
    """A renamed field replayed silently as None: another round."""
    reply = {("answer" if name == "text" else name): value for name, value in REPLY.items()}
    with pytest.raises(RunError, match=r"llm_calls.jsonl, line 1: the reply lacks text"):
        RecordedChatModel("openai:a", _recording(tmp_path, reply))


def test_a_recording_cut_inside_a_character_drops_the_cut_line(tmp_path, caplog):
    path = _recording(tmp_path, REPLY)
    path.write_bytes(path.read_bytes() + path.read_bytes()[:path.read_bytes().index("é".encode()) + 1])
    assert RecordedChatModel("openai:a", path).recorded == 1  # was: UnicodeDecodeError out of the replay
    assert "skipping corrupt line 2" in caplog.text


def test_a_replay_of_another_models_recording_says_so(tmp_path):
    model = RecordedChatModel("openai:b", _recording(tmp_path, REPLY))
    with pytest.raises(RunError, match=r"it recorded openai:a, not openai:b \(data_engine.explorer_model\)"):
        model.generate([[{"role": "user", "content": "hi"}]])


def test_a_damaged_round_report_is_one_line_naming_it(tmp_path, capsys):
    """A round's report (written atomically, like the pool) damaged afterwards: one line, not a JSONDecodeError."""
    run = tmp_path / "run"
    (run / "round_000").mkdir(parents=True)
    (run / "round_000" / "report.json").write_bytes(b'{"round": 0, "targets": \xff')
    returned = cli(["train", "--profile", "tiny", "--quiet", "--out", str(run)])
    err = capsys.readouterr().err
    assert returned == 1 and "Traceback" not in err and err.count("\n") == 1, err
    assert "round_000/report.json: not JSON; the file is written atomically" in err
