"""Thousands of hostile or malformed call strings against BFCLEnv.execute and parse_call_list.

Nothing may raise, every hostile call must come back as an error observation, no code may run (no sentinel
file, no new global, no new module, same cwd and environment) and the backend state must not change.
"""

import builtins
import decimal
import json
import os
import random
import sys
import time

import mpmath
import pytest

from coevolve_lib.core import openai_model
from coevolve_lib.core.config import BUDGET_REASONS, RolloutConfig
from coevolve_lib.core.models import ChatModel, Generation, GenerationConfig
from coevolve_lib.core.records import append_jsonl, read_jsonl
from coevolve_lib.core.safe_calls import Call, parse_call_list
from coevolve_lib.envs.bfcl import backend as bfcl_backend
from coevolve_lib.envs.bfcl.benchmark import BFCLEnv
from coevolve_lib.envs.bfcl.episode import Episode
from coevolve_lib.envs.bfcl.tasks import load_tasks
from coevolve_lib.rollout import toolcalls
from coevolve_lib.rollout.agent import RolloutPhase, run_rollouts

N_GENERATED = 3000
SENTINEL = f"/tmp/coevolve_fuzz_pwned_{os.getpid()}"

# Every template holds at least one construct the parser must refuse; {s} is the sentinel path and {m} a
# real backend method name, so hostile arguments also reach known functions.
TEMPLATES = [
    "import os", "from os import system", "import os; os.system('touch {s}')",
    "__import__('os').system('touch {s}')", "__import__('pathlib').Path('{s}').touch()",
    "{m}(x=__import__('os').system('touch {s}'))", "{m}(__import__('os').getcwd())",
    "().__class__.__bases__[0].__subclasses__()", "{m}.__globals__", "{m}.__self__._load_scenario({{}})",
    "{m}(a=().__class__.__mro__)", "[].__class__.__base__", "os.system('touch {s}')", "self._instances",
    "sys.modules['os'].system('touch {s}')", "open('/etc/passwd')", "open('{s}', 'w')", "{m}(open('{s}', 'w'))",
    "exec('open(\"{s}\", \"w\")')", "eval('1+1')", "globals()", "locals()", "vars()", "dir()",
    "globals().__setitem__('PWNED', 1)", "setattr(__builtins__, 'PWNED', 1)", "compile('1', 'x', 'eval')",
    "getattr({m}, '__globals__')", "breakpoint()", "input()", "exit()", "quit()", "help()", "print('pwned')",
    "_load_scenario(scenario={{}})", "__init__()", "_list_contents()", "{m}.__call__()",
    "(lambda: open('{s}', 'w'))()", "{m}(a=lambda: 1)", "{m}(lambda x: x)",
    "[open('{s}', 'w') for _ in range(1)]", "{m}(a=[x for x in range(10)])", "{m}(a={{k: 1 for k in 'ab'}})",
    "{m}(a=(x for x in ()))", "{m}(a={m}())", "{m}({m}())", "{m}(a=(y := 1))", "(z := open('{s}', 'w'))",
    "{m}(a=f'{{open(\"{s}\", \"w\")}}')", "f'{{__import__(\"os\")}}'", "{m}(*[1])", "{m}(**{{'a': 1}})",
    "{m}(a={{**{{}}}})", "{m}(a=1 if True else 2)", "{m}(a=not 1)", "{m}(a=1 + 2)", "{m}(a='x' * 10 ** 9)",
    "{m}(a=b'bytes')", "{m}(a=...)", "{m}(a=1j)", "{m}(a=1e999)", "{m}(a={{[1]: 2}})", "{m}(a={{{{}}}})",
    "{m}(a=x)", "{m}(a=True.real)", "{m}(a='x'[0])", "{m}(a=[1][0])", "{m}(a=-'x')", "{m}()()", "{m}()[0]",
    "{m}()['x']", "{m}().x", "{m}(", "{m}(a=)", "{m}(a=1,,)", "{m}(1, a=1, 2)", "{m}(a=1, a=2)",
    "def f(): pass", "class A: pass", "x = 1", "del x", "global x", "assert False", "raise SystemExit",
    "yield 1", "await x", "async def f(): pass", "with open('{s}', 'w') as f: pass", "{m}(); open('{s}', 'w')",
    "{m}()\nopen('{s}', 'w')", "[{m}(), open('{s}', 'w')]", "({m}(), __import__('os'))",
    "{m}(a='\x00')", "{m}\x00()", "{m}(a='\ud800')", "\udfff", "{m}(a='\udcff\udcfe')", "\ufeff{m}(a=1+1)",
    "{m}(a=" + "[" * 10_000 + "]" * 10_000 + ")", "{m}(a=" + "(" * 300 + ")" * 300 + ")",
    "{m}(a=" + "{'k': " * 50 + "1" + "}" * 50 + ")", "{m}(a='" + "A" * 1_000_000 + "')",
    "{m}(a=" + "9" * 5000 + ")", "[" * 100_001,
]
JUNK_TOKENS = ["(", ")", "[", "]", "{", "}", ",", "=", ":", ".", "*", "**", "lambda", "import", "__class__",
               "os", "open", "'x'", '"y"', "1", "-2.5", "None", "\x00", "\ud800", "é", "\n", " ", "#", "\\",
               "__import__", "exec", "f'", "{m}", ";", "@", "yield", ":="]


def hostile_corpus(methods: list[str], rng: random.Random) -> list[str]:
    """Each template once per method of a sample, then seeded combinations of them."""
    def fill(template):
        text = template.replace("{s}", SENTINEL).replace("{m}", rng.choice(methods))
        return text.replace("{{", "{").replace("}}", "}")

    corpus = [fill(t) for t in TEMPLATES]
    while len(corpus) < N_GENERATED:
        kind = rng.randrange(4)
        small = [t for t in TEMPLATES if len(t) < 1000]
        if kind == 0:  # a list mixing hostile elements
            corpus.append("[" + ", ".join(fill(rng.choice(small)) for _ in range(rng.randint(1, 4))) + "]")
        elif kind == 1:  # a hostile value as the argument of a known method
            corpus.append(f"{rng.choice(methods)}({rng.choice(['a', 'file_name', 'x'])}={fill(rng.choice(small))})")
        elif kind == 2:  # token soup that always contains a forbidden token
            soup = [fill(rng.choice(JUNK_TOKENS)) for _ in range(rng.randint(1, 30))]
            soup.insert(rng.randrange(len(soup) + 1), rng.choice(["__import__", "lambda", "import", "\x00"]))
            corpus.append("".join(soup))
        else:  # a hostile template with whitespace and comments around it
            padding = rng.choice(["  ", "\t", "\n", "# c\n"])
            corpus.append(padding + fill(rng.choice(small)) + rng.choice(["", " ", "  # x"]))
    return corpus


@pytest.fixture(scope="module")
def env():
    """One env holding all eight backend classes (configs taken from real tasks)."""
    config, classes = {}, []
    for task in load_tasks("v3", "base"):
        for name in task.involved_classes:
            if name not in classes:
                classes.append(name)
                config[name] = task.initial_config.get(name, {})
    assert len(classes) == 8
    return BFCLEnv.from_config(config, classes)


def test_hostile_calls_run_nothing_and_change_nothing(env, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    methods = sorted(env.method_names)
    corpus = hostile_corpus(methods, random.Random(1234))
    hostile_objects = [Call("open", ("/etc/passwd",)), Call("_load_scenario", ({},)), Call("__init__"),
                       Call(methods[0], (), (("a", object()),)), Call(methods[0], (), ((1, 2),)),
                       Call("ls.__globals__"), Call(methods[0], (lambda: 1,))]
    env.execute(["ls(", Call("nope")])  # warm any lazy import on the error paths before taking snapshots
    parse_call_list("ls(", env.method_names)
    before = dict(state=env.state(), modules=set(sys.modules), builtins=set(vars(builtins)), cwd=os.getcwd(),
                  environ=dict(os.environ), files=set(os.listdir(tmp_path)), history=repr(env.history))

    for i, text in enumerate(corpus):
        observations = env.execute([text])
        assert len(observations) == 1 and observations[0].startswith("Error during execution: "), (i, text[:200])
        calls, errors = parse_call_list(text, env.method_names)
        # A list may mix a plain known call with hostile ones: the hostile elements must all be refused.
        assert errors and all(call.name in env.method_names for call in calls), (i, text[:200])
        if i % 500 == 0:
            assert env.state() == before["state"], (i, text[:200])
    observations = env.execute(corpus[:200] + hostile_objects)  # one big step too
    assert len(observations) == 200 + len(hostile_objects)
    assert all(o.startswith("Error during execution: ") for o in observations)

    assert len(corpus) >= N_GENERATED
    assert not os.path.exists(SENTINEL)
    assert env.state() == before["state"] and repr(env.history) == before["history"]
    assert set(sys.modules) == before["modules"]
    assert set(vars(builtins)) == before["builtins"] and "PWNED" not in globals()
    assert os.getcwd() == before["cwd"] and dict(os.environ) == before["environ"]
    assert set(os.listdir(tmp_path)) == before["files"]


def test_random_junk_never_raises(env):
    """Random character strings: parse_call_list and execute answer, never raise; accepted calls are real calls."""
    rng = random.Random(99)
    alphabet = "abcdefls_()[]{}'\",=:.*- 0123456789\n\x00\\é\ud800"
    names = sorted(env.method_names)
    for _ in range(1000):
        text = rng.choice(["", *names[:5]]) + "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        calls, errors = parse_call_list(text, env.method_names)
        assert isinstance(calls, list) and isinstance(errors, list) and (calls or errors or text.strip("`\n ") == "[]")
        assert all(call.name in env.method_names for call in calls)
        assert len(env.execute([text])) == 1


# ---- Issue 9, item 3: hostile classes that once raised, stalled or ran. Each is a named, seeded case; every entry
# point is timed per call, since a stall is the bug. ----

CALL_SECONDS = 1.0
SLOWEST: dict[str, float] = {}


def timed(case: str, fn, *args):
    """fn(*args), asserting it returns within CALL_SECONDS; the slowest time per case is kept for the report."""
    start = time.perf_counter()
    result = fn(*args)
    seconds = time.perf_counter() - start
    SLOWEST[case] = max(SLOWEST.get(case, 0.0), seconds)
    assert seconds < CALL_SECONDS, (case, f"{seconds:.2f}s", repr(args)[:200])
    return result


def _big_literals(rng):
    """Hex, octal and binary integer literals over MAX_INT_DIGITS decimal digits (short as source text)."""
    return [f"0x{rng.choice('123456789abcdef')}{'f' * rng.randint(3600, 40_000)}",
            f"0o7{'7' * rng.randint(4800, 40_000)}", f"0b1{'1' * rng.randint(14_300, 90_000)}"]


def _prompt_calls(case, rng):
    """Call strings (BFCL prompt style) of each hostile class that has one."""
    if case == "int_literal_over_4300_digits":
        out = []
        for literal in _big_literals(rng):
            out += [f"cd(folder={literal})", f"add({literal}, 1)", f"mean(numbers=[1, -{literal}])",
                    f"echo(content={{'k': ({literal},)}})"]
        return out
    if case == "extreme_math_arguments":
        return ["power(base=10, exponent=10000000)", "power(10, 10000000)",
                f"power(base=-7, exponent={10**rng.randint(5, 30)})",
                "square_root(number=2, precision=10000000)", f"square_root(2, {rng.randint(10**6, 10**7)})",
                "logarithm(value=2, base=3, precision=1000000)", "logarithm(value=10, base=2, precision=1e7)",
                f"round_number(number={rng.randint(1, 99)}, decimal_places=-1000000000000000000)"]
    if case == "full_width_names":
        return ["ｌｓ()", "ｃｄ(folder='document')", "[ｍｅａｎ(numbers=[1, 2]), ｌs()]", "\n ｐｗｄ()",
                "echo(content='x')\nｌｓ()"]
    return []


def _native_replies(case, rng):
    """Native replies (text, structured calls) of each hostile class; structured `arguments` are JSON text, as an
    OpenAI endpoint returns them, and pass through openai_model._parse_arguments first."""
    def block(payload_text):
        return f"<tool_call>{payload_text}</tool_call>"
    if case == "int_literal_over_4300_digits":
        digits = "9" * rng.randint(4301, 50_000)
        return [(block(f'{{"name": "cd", "arguments": {{"folder": {digits}}}}}'), None),
                ("", [{"name": "cd", "arguments": f'{{"folder": {digits}}}'}]),
                ("", [{"name": "cd", "arguments": {"folder": 7 << 20_000}}])]
    if case == "json_huge_int_and_deep_nesting":
        depth = rng.randint(10_000, 200_000)
        deep = "[" * depth + "]" * depth
        nested = {}
        for _ in range(depth):
            nested = {"k": nested}
        return [(block(deep), None), (block(f'{{"name": "ls", "arguments": {{"a": {deep}}}}}'), None),
                (block('{"name": "ls", "arguments": ' + '{"a": ' * depth + "1" + "}" * depth + "}"), None),
                ("", [{"name": "ls", "arguments": deep}]), ("", [{"name": "ls", "arguments": {"a": nested}}]),
                (block('{"name": "ls", "arguments": {"a": ' + "1" * 10_000 + "}}"), None)]
    if case == "lone_surrogate_argument":
        return [(block('{"name": "echo", "arguments": {"content": "\\ud800 \\udfff", "file_name": "s.txt"}}'), None),
                ("", [{"name": "echo", "arguments": '{"content": "x\\udcff"}'}]),
                ("", [{"name": "touch", "arguments": {"file_name": "\ud800.txt"}}]), ("\udfff", None)]
    if case == "huge_string_argument":
        huge = "A" * 100_000_000
        return [("", [{"name": "echo", "arguments": json.dumps({"content": huge})}]),
                ("", [{"name": "echo", "arguments": {"content": huge}}]),
                (block(json.dumps({"name": "echo", "arguments": {"content": huge}})), None), (huge, None)]
    if case == "full_width_names":
        return [(block('{"name": "ｌｓ", "arguments": {}}'), None),
                ("", [{"name": "ｃｄ", "arguments": '{"folder": "x"}'}])]
    return []


def _prompt_replies(case, rng):
    """Prompt-style replies: the calls above, and long whitespace runs around or inside a code fence."""
    replies = [f"[{call}]" for call in _prompt_calls(case, rng)]
    if case == "code_fence_whitespace_runs":
        n = rng.randint(64_000, 300_000)
        replies += ["```" + " " * n + "x", "a" + " " * n + "b", "```python\n[ls(" + " " * n + ")]\n```",
                    " " * n + "```", "\n\t " * (n // 3) + "[ls()]", "[ls()" + " " * n, "`" * n, " " * 1_000_000]
    if case == "huge_string_argument":
        replies += ["[echo(content='" + "A" * 100_000_000 + "')]"]
    return replies


CASES = ["int_literal_over_4300_digits", "json_huge_int_and_deep_nesting", "extreme_math_arguments",
         "precision_restored_per_call", "code_fence_whitespace_runs", "lone_surrogate_argument",
         "huge_string_argument", "full_width_names"]


@pytest.fixture(scope="module")
def math_task():
    """A real BFCL task whose environment holds GorillaFileSystem and MathAPI."""
    return next(t for t in load_tasks("v3", "base") if {"GorillaFileSystem", "MathAPI"} <= set(t.involved_classes))


@pytest.mark.parametrize("case", CASES)
def test_hostile_class_is_an_error_not_an_exception_or_a_stall(case, env, math_task, tmp_path):
    rng = random.Random(f"issue9/{case}")
    before = dict(state=env.state(), history=repr(env.history))
    for text in _prompt_calls(case, rng):
        observation, = timed(case, env.execute, [text])
        assert observation.startswith("Error during execution: "), (case, text[:100], observation[:200])
        calls, errors = timed(case, parse_call_list, text, env.method_names)
        if case == "extreme_math_arguments":  # well-formed calls: refused by the executor's guard, before they run
            assert calls and not errors and "limit" in observation, (text[:100], observation[:200])
        else:
            assert not calls and errors, (case, text[:100])
    assert env.state() == before["state"]  # nothing ran
    # Refused while parsing: not recorded. The guarded math calls are recorded, as BFCL records a call that errs.
    assert (repr(env.history) == before["history"]) == (case != "extreme_math_arguments")

    native_replies, prompt_replies = _native_replies(case, rng), _prompt_replies(case, rng)
    for text, structured in native_replies:
        if structured:
            structured = [{**c, "arguments": timed(case, openai_model._parse_arguments, c["arguments"])}
                          if isinstance(c["arguments"], str) else c for c in structured]
        reply = timed(case, toolcalls.parse_native, text, structured, env.method_names)
        assert reply.errors or case == "lone_surrogate_argument", (case, text[:100])  # surrogates are valid text
        assert all(call.name in env.method_names for call in reply.calls)
    for text in prompt_replies:
        reply = timed(case, toolcalls.parse_prompt_style, text, env.method_names)
        valid_calls_allowed = case in ("extreme_math_arguments", "code_fence_whitespace_runs")
        assert valid_calls_allowed or not reply.calls, (case, text[:100])

    # The same replies inside real episodes, then recorded and read back: the episode goes on, the record is written.
    episodes = {fmt: Episode(math_task, 0, fmt, RolloutPhase()) for fmt in ("native", "prompt")}
    generations = [("native", Generation(text, structured, 1, 1, 0.0, "stop")) for text, structured in native_replies]
    generations += [("prompt", Generation(text, None, 1, 1, 0.0, "stop")) for text in prompt_replies]
    for fmt, generation in generations:
        timed(case, episodes[fmt].feed, generation)
    for fmt, episode in episodes.items():
        # A reply over the episode budget's reply length ends the episode unparsed (the parsers saw it above).
        assert episode.parser_failures == 0 and episode.terminated in (None, "completed", "turn_step_cap",
                                                                       *BUDGET_REASONS)
        record = episode.record("fuzz")
        if case == "huge_string_argument":  # the 100 MB replies need not reach the disk
            record["messages"] = record["steps"] = None
        timed(case, append_jsonl, tmp_path / f"{case}.jsonl", record)
        assert read_jsonl(tmp_path / f"{case}.jsonl")[-1] == json.loads(json.dumps(record, default=str))

    if case == "precision_restored_per_call":
        math_env = BFCLEnv.from_config({}, ["MathAPI"])
        prec, prec_mp = decimal.getcontext().prec, mpmath.mp.prec
        third, third_mp = str(decimal.Decimal(1) / 3), str(mpmath.mpf(1) / 3)
        for _ in range(20):
            precision, number = rng.randint(1, 4300), rng.choice([2, 3, 5, 7, 10, 11])  # irrational roots and logs
            call = rng.choice([f"square_root(number={number}, precision={precision})",
                               f"logarithm(value={number}, base=3, precision={precision})"])
            observation, = timed(case, math_env.execute, [call])
            assert "result" in observation and len(observation) > precision, (call, observation[:100])  # as asked
            assert (decimal.getcontext().prec, mpmath.mp.prec) == (prec, prec_mp), call  # and nothing leaked
        assert (str(decimal.Decimal(1) / 3), str(mpmath.mpf(1) / 3)) == (third, third_mp)
    print(f"slowest call of {case}: {SLOWEST.get(case, 0.0):.3f}s")


def test_full_width_names_are_errors_in_bfcl_executor_too(env):
    """Parity: BFCL's own executor finds no function `ｌｓ` (a NameError), so the kit refuses it too."""
    _, utils = bfcl_backend.official_checker("v3")
    config = {name: {} for name in ("GorillaFileSystem", "MathAPI")}
    for text in ["ｌｓ()", "ｍｅａｎ(numbers=[1, 2])"]:
        results, _ = utils.execute_multi_turn_func_call([text], config, list(config), "fuzz", "fullwidth_0")
        assert results[0].startswith("Error during execution: "), results
        assert env.execute([text])[0].startswith("Error during execution: ")


class HostileModel(ChatModel):
    """Replies with every hostile reply of every class, in turn, to every episode of the batch. Unit tests only."""

    def __init__(self, replies, native_tools):
        self.name, self.native_tools, self.replies, self.calls = "hostile", native_tools, replies, 0

    def generate(self, conversations, tools=None, config=GenerationConfig()):
        text, structured = self.replies[self.calls % len(self.replies)]
        self.calls += 1
        return [Generation(text, structured, 1, 1, 0.0, "stop") for _ in conversations]


@pytest.mark.parametrize("native", [True, False])
def test_rollout_batch_survives_any_model_output(native, tmp_path):
    """Every small hostile reply through run_rollouts: every episode ends with a record on disk."""
    rng = random.Random(9)
    small = [case for case in CASES if case != "huge_string_argument"]
    if native:
        replies = [r for case in small for r in _native_replies(case, rng)]
    else:
        replies = [(text, None) for case in small for text in _prompt_replies(case, rng) + _prompt_calls(case, rng)]
    tasks = [t for t in load_tasks("v3", "base") if "MathAPI" in t.involved_classes][:3]
    path = tmp_path / "rollouts.jsonl"
    records = run_rollouts(HostileModel(replies, native), tasks, RolloutPhase(RolloutConfig(batch_size=3)),
                           on_record=lambda record: append_jsonl(path, record), progress=False, new_episode=Episode)
    assert len(records) == len(read_jsonl(path)) == 3
    ends = ("completed", "turn_step_cap", "episode_step_cap", *BUDGET_REASONS)
    assert all(r["parser_failures"] == 0 and r["terminated"] in ends for r in records), \
        [r["terminated"] for r in records]
