"""Replies built to multiply work, through every path that model or LLM text takes (issues 22 and 29): the policy's BFCL
episodes in both tool formats (calls repeated thousands of times, huge observations, long replies, nested and long
inputs), the LLM explorer and context builder end to end, and every parser of LLM text on its own (judge, explorer
actions, task blocks, AppWorld code, JSON objects, the test server's tool calls).

The fuzz runs in a child process (`python tests/test_reply_fuzz.py` prints its figures as one JSON line), so its peak
memory is its own: under 200 MB, no single call over 1 s, every record's model-made part (its bytes in the file, less
the prompt and the record's keys) within the record budget, every recorded call read back by the kit's parser, 0
exceptions escaping. Seeded; about 20 s. AppWorld's episodes apply the same budget (tests/test_appworld.py)."""

from __future__ import annotations

import json
import random
import resource
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SLOWEST_ALLOWED_S = 1.0
PEAK_ALLOWED_MB = 200


def test_replies_built_to_multiply_work_stay_within_budget():
    done = subprocess.run([sys.executable, __file__], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps(figures, indent=1))
    assert figures["escaped"] == [], figures["escaped"]
    assert figures["unreadable_calls"] == [], figures["unreadable_calls"]
    assert figures["peak_mb"] < PEAK_ALLOWED_MB, figures["peak_mb"]
    assert figures["slowest_s"] < SLOWEST_ALLOWED_S, figures["slowest_call"]
    assert figures["largest_budgeted_bytes"] <= figures["record_budget"], figures["largest_record"]
    # every family ended the way its budget says, in both formats
    assert figures["ends"] == EXPECTED_ENDS, figures["ends"]
    assert figures["parsed"] >= 100 and figures["explorer_triplets"] > 0


EXPECTED_ENDS = {f"{family}/{fmt}": end for fmt in ("native", "prompt") for family, end in {
    "many_calls_long_reply": "reply_cap", "many_calls": "step_call_cap", "calls_across_replies": "episode_call_cap",
    "one_huge_observation": "observation_cap", "observations_across_replies": "episode_observation_cap",
    "long_replies": "record_cap", "nested_and_long_inputs": "completed",
    # issue 29: work before any cut, and escapes
    "many_keywords": "record_cap", "shared_folders": "state_cap", "deep_long_names": "state_cap",
    "find_multiplier": "observation_cap",
    "escape_heavy": "record_cap"}.items()} | {
    # issue 29: an endpoint's structured calls count in the reply and record budgets (a 79 MB record before)
    "structured_long_calls/native": "record_cap", "structured_many_calls/native": "step_call_cap",
    "structured_over_reply/native": "reply_cap", "structured_giant_ids/native": "reply_cap",
    "structured_repeated_ids/native": "turn_step_cap"}


# ------------------------------------------------------------------------------------------------ the child

class Timer:
    """Times every call into the kit, and keeps what escaped instead of raising it."""

    def __init__(self):
        self.slowest, self.slowest_call, self.escaped = 0.0, "", []

    def __call__(self, label: str, fn, *args):
        start = time.perf_counter()
        try:
            return fn(*args)
        except Exception as error:  # the point of the fuzz: nothing may escape; collect it for the assertion
            self.escaped.append(f"{label}: {type(error).__name__}: {str(error)[:200]}")
            return None
        finally:
            seconds = time.perf_counter() - start
            if seconds > self.slowest:
                self.slowest, self.slowest_call = seconds, label


def _call(fmt: str, name: str, **arguments) -> str:
    if fmt == "native":
        return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments}, ensure_ascii=False)}</tool_call>"
    return f"{name}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})"


def _reply(fmt: str, calls: list[str], padding: str = "") -> str:
    if fmt == "native":
        return padding + "".join(calls)
    return f"[{', '.join(calls)}]"


def families(fmt: str, rng: random.Random) -> dict[str, list]:
    """Each family's replies, fed in turn (cycling) to one episode until it ends: a text, or (text, an endpoint's
    structured tool calls)."""
    cat, ls = _call(fmt, "cat", file_name="big.txt"), _call(fmt, "ls")
    # BFCL's observations are JSON with ASCII escapes: a file of 20k accented letters is a 120k-character `cat`
    write = _call(fmt, "echo", content="".join(rng.choice("éèêàùç") for _ in range(20_000)), file_name="big.txt")
    write_smaller = _call(fmt, "echo", content="".join(rng.choice("abcdefgh") for _ in range(50_000)),
                          file_name="big.txt")
    # prompt style: spaces inside the call list (valid Python) make a long reply with one call
    long_one = _reply(fmt, [ls], padding="x" * 60_000) if fmt == "native" else "[ls(" + " " * 60_000 + ")]"
    nested = ('<tool_call>{"name": "ls", "arguments": ' + "[" * 30_000 + "]" * 30_000 + "}</tool_call>"
              if fmt == "native" else "[ls(a=" + "[" * 30_000 + "]" * 30_000 + ")]")
    huge_int = _call(fmt, "cd", folder=int("9" * 4000)) if fmt == "native" else "[cd(folder=" + "9" * 5000 + ")]"
    structured = {} if fmt == "prompt" else {  # (text, the endpoint's tool_calls): nothing in the text
        "structured_long_calls": [("", [{"id": "c0", "name": "echo", "arguments": json.dumps(
            {"content": "x" * 60_000, "file_name": "a.txt"})}])],
        "structured_many_calls": [("", [{"id": f"c{i}", "name": "ls", "arguments": "{}"} for i in range(5_000)])],
        "structured_over_reply": [("", [{"id": f"c{i}", "name": "echo", "arguments": {"content": "y" * 50_000}}
                                        for i in range(32)])],
        # issue 47: ids are part of the reply (9 replies with giant ids made a 544 MB record), and one id repeated
        # for every call is never sent back twice
        "structured_giant_ids": [("", [{"id": "i" * 2_000_000, "name": "ls", "arguments": "{}"}])],
        "structured_repeated_ids": [("", [{"id": "call_1", "name": "ls", "arguments": "{}"}] * 3)],
    }
    # issue 29: work the output budgets do not see. A call with thousands of keywords (the duplicate check was
    # quadratic); `cp` of a folder shares its subfolders, so each copy one level up doubles what `find` walks; a deep
    # chain of long names (`find` prints each full path); strings whose every character escapes in the record.
    keywords = _call(fmt, "ls", **{f"k{i}": 1 for i in range(5_000)})
    down = [_call(fmt, "mkdir", dir_name="x"), _call(fmt, "cd", folder="x")] * 15
    up_and_copy = [_call(fmt, "cd", folder=".."), _call(fmt, "cp", source="x", destination="y")] * 16
    long_name = "n" * 250
    down_long = [_call(fmt, "mkdir", dir_name=long_name), _call(fmt, "cd", folder=long_name)] * 16
    escapes = _call(fmt, "echo", content="\x00" * 10_000, file_name="e.txt")
    # issue 47: under the state cap, `find` prints every path in full, so each call prints about the whole state
    down_59 = [_call(fmt, "mkdir", dir_name=long_name), _call(fmt, "cd", folder=long_name)] * 15
    finds = [_call(fmt, "find", path=".")] * 32
    return structured | {
        "many_keywords": [_reply(fmt, [keywords])],
        "shared_folders": [_reply(fmt, down)] * 2 + [_reply(fmt, [_call(fmt, "mkdir", dir_name="x")])]
        + [_reply(fmt, up_and_copy)] * 10,
        "deep_long_names": [_reply(fmt, down_long)],
        "find_multiplier": [_reply(fmt, down_59)] * 4 + [_reply(fmt, [_call(fmt, "cd", folder="..")] * 30)] * 2
        + [_reply(fmt, finds)],
        "escape_heavy": [_reply(fmt, [escapes])],
        "many_calls_long_reply": [_reply(fmt, [cat] * 3_700)],  # ~96 kB, as the reproducer
        "many_calls": [_reply(fmt, [ls] * 5_000)[:60_000]],
        "calls_across_replies": [_reply(fmt, [ls] * 30)],
        "one_huge_observation": [_reply(fmt, [write]), _reply(fmt, [cat])],
        "observations_across_replies": [_reply(fmt, [write_smaller])] + [_reply(fmt, [cat] * 25)] * 40,
        "long_replies": [long_one],
        "nested_and_long_inputs": [nested, huge_int, "<tool_call>" * 5_000, "[" * 60_000, "(" * 60_000,
                                   _reply(fmt, [_call(fmt, "cd", folder="\ud800" * 100)])],
    }


def fuzz_episodes(timer: Timer, out: Path) -> dict:
    from coevolve_lib.core.config import EpisodeBudget
    from coevolve_lib.core.models import Generation
    from coevolve_lib.core.records import append_jsonl
    from coevolve_lib.core.safe_calls import CallParseError, parse_call
    from coevolve_lib.envs.bfcl.episode import Episode
    from coevolve_lib.envs.bfcl.tasks import load_tasks
    from coevolve_lib.rollout.agent import RolloutPhase

    rng = random.Random(22)
    task = next(t for t in load_tasks("v3", "base") if "GorillaFileSystem" in t.involved_classes)
    config = RolloutPhase()
    ends, largest, largest_name, largest_line, unreadable = {}, 0, "", 0, []
    for fmt in ("native", "prompt"):
        for family, replies in families(fmt, rng).items():
            name = f"{family}/{fmt}"
            episode = timer(f"{name} start", Episode, task, 0, fmt, config)
            for index in range(60):
                if episode.done:
                    break
                reply = replies[index % len(replies)]
                text, calls = reply if isinstance(reply, tuple) else (reply, None)
                timer(f"{name} reply {index}", episode.feed, Generation(text, calls, 1, len(text) // 4, 0.0, "stop"))
            ends[name] = episode.terminated
            record = timer(f"{name} record", episode.record, "fuzz")
            for step in record["steps"]:  # every recorded call reads back as itself through the kit's parser
                for source in step["calls"]:
                    try:
                        readable = parse_call(source).to_source() == source
                    except CallParseError:
                        readable = False
                    if not readable:
                        unreadable.append(f"{name}: {source[:80]}")
            path = out / f"{family}_{fmt}.jsonl"
            timer(f"{name} write", append_jsonl, path, record)
            size = path.stat().st_size
            # What the budget counts: the file's bytes less those of the same record without the model's part (the
            # task's prompt, BFCL's docs, and the record's own keys and fields)
            first_reply = next(i for i, m in enumerate(record["messages"]) if m["role"] == "assistant")
            unbudgeted = dict(record, messages=record["messages"][:first_reply], steps=[])
            budgeted = size - len((json.dumps(unbudgeted, ensure_ascii=False, default=str) + "\n").encode())
            if budgeted > largest:
                largest, largest_name, largest_line = budgeted, name, size
    return {"ends": ends, "unreadable_calls": unreadable, "largest_record_bytes": largest_line,
            "largest_budgeted_bytes": largest, "largest_record": largest_name,
            "record_budget": EpisodeBudget().max_record_chars}


def fuzz_explorer(timer: Timer) -> int:
    """The LLM explorer and context builder end to end, on a model whose every reply is hostile."""
    from coevolve_lib.core.config import ExploreConfig
    from coevolve_lib.core.models import ChatModel, Generation, GenerationConfig
    from coevolve_lib.core.paths import RUNS_DIR
    from coevolve_lib.envs.bfcl.environment import BFCLEnvironment
    from coevolve_lib.envs.bfcl.explore import explore
    from coevolve_lib.envs.bfcl.tasks import load_tasks
    from coevolve_lib.profiles import data_engine_config

    replies = ["<action>" * 20_000, "<action>" + "ls() " * 20_000 + "</action>", "{" * 100_000,
               "<action>cat(file_name='" + "a" * 200_000 + "')</action>", '{"a": ' * 30_000,
               "<action>[" + "ls(), " * 5_000 + "]</action>", "<action>ls()</action>" * 5_000]

    class Hostile(ChatModel):
        name, native_tools, calls = "hostile", False, 0

        def generate(self, conversations, tools=None, config=GenerationConfig()):
            out = []
            for _ in conversations:
                text = replies[self.calls % len(replies)]
                self.calls += 1
                out.append(Generation(text, None, 1, len(text) // 4, 0.0, "stop"))
            return out

    task = next(t for t in load_tasks("v3", "base") if "GorillaFileSystem" in t.involved_classes)
    environment = BFCLEnvironment(data_engine_config("tiny"), RUNS_DIR / "tests")
    trajectory = {"schema": "rollout/v1", "task_id": task.id, "steps": [], "turn_valid": [False], "score": 0.0,
                  "success": False, "terminated": "completed", "error_type": "fuzz", "error_message": "fuzz"}
    signal = {"schema": "signal/v1", "signal_id": f"boundary/1/{task.id}/0", "type": "boundary",
              "rollout_id": f"1/{task.id}/0", "task_id": task.id, "step": 1, "evidence": {"group_scores": [1.0, 0.0]}}
    target = replace(environment.target(task), signal=signal, trajectory=trajectory)
    config = ExploreConfig(explorer="llm", context_builder="llm", runs=3, calls_per_run=len(replies))
    explored = timer("explore", explore, target, config, Hostile())
    return len(explored[1]) if explored else 0


def fuzz_parsers(timer: Timer) -> int:
    """Every parser of LLM text on its own, at 256k characters of each hostile shape."""
    from collections import Counter

    from coevolve_lib.cli.openai_server import parse_tool_calls
    from coevolve_lib.core.llm_json import LLMOutputError, extract_json_object
    from coevolve_lib.engine.judge import parse_judge
    from coevolve_lib.engine.llm_abstraction import parse_task_blocks
    from coevolve_lib.envs.appworld.benchmark import extract_code
    from coevolve_lib.envs.bfcl.explore_llm import parse_action
    from coevolve_lib.rollout import toolcalls

    size = 256 * 1024
    shapes = {"spaces": " " * size, "opening_tags": "", "unclosed_fence": "```python\n" + "x = 1\n" * (size // 6),
              "nested": "[" * size, "braces": '{"a": ' * (size // 6), "digits": "9" * size,
              "success_reason": "success reason: " * (size // 16), "newlines": "\n" * size,
              "braces_then_unclosed_list": '{"a": ' * 200 + "[" + "1," * (size // 2)}
    tags = ["<action>", "<task>", "<tool_call>", "```", "<think>", "Query:", "success:", "reason:"]
    parsers = {
        "judge": parse_judge,
        "explorer_action": lambda text: parse_action(text, {"ls", "cd"}),
        "task_blocks": lambda text: parse_task_blocks(text, Counter()),
        "appworld_code": extract_code,
        "json_object": extract_json_object,
        "test_server_tool_calls": parse_tool_calls,
        "native_reply": toolcalls.parse_native,
        "prompt_reply": toolcalls.parse_prompt_style,
    }
    parsed = 0
    for tag in tags:
        shapes[f"repeated {tag}"] = (tag * (size // len(tag)))[:size]
        shapes[f"{tag} then spaces"] = tag + " " * size
    for parser_name, parser in parsers.items():
        for shape_name, text in shapes.items():
            timer(f"{parser_name} on {shape_name}", _expect_data_or_refusal, parser, text, LLMOutputError)
            parsed += 1
    return parsed


def _expect_data_or_refusal(parser, text, refusal):
    try:
        return parser(text)
    except refusal:  # extract_json_object's documented refusal of text without a JSON object
        return None


def peak_mb() -> float:
    """This process's peak resident memory since it started (`VmHWM`: getrusage's `ru_maxrss` would also count the
    parent's memory at the fork)."""
    status = Path("/proc/self/status")
    if not status.exists():  # macOS: no /proc; ru_maxrss is in bytes there
        return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 1)
    line = next(line for line in status.read_text().splitlines() if line.startswith("VmHWM:"))
    return round(int(line.split()[1]) / 1024, 1)


def main() -> None:
    import tempfile

    from coevolve_lib.core.runtime import configure_process

    configure_process()
    timer = Timer()
    with tempfile.TemporaryDirectory() as out:
        figures = fuzz_episodes(timer, Path(out))
    figures["explorer_triplets"] = fuzz_explorer(timer)
    figures["parsed"] = fuzz_parsers(timer)
    figures.update(slowest_s=round(timer.slowest, 3), slowest_call=timer.slowest_call, escaped=timer.escaped,
                   peak_mb=peak_mb())
    print(json.dumps(figures))


if __name__ == "__main__":
    main()
