"""Thousands of hostile or malformed call strings against BFCLEnv.execute and parse_call_list.

Nothing may raise, every hostile call must come back as an error observation, no code may run (no sentinel
file, no new global, no new module, same cwd and environment) and the backend state must not change.
"""

import builtins
import os
import random
import sys

import pytest

from coevolve_lib.envs.bfcl import BFCLEnv, load_tasks
from coevolve_lib.envs.safe_calls import Call, parse_call_list

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
