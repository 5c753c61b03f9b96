"""safe_calls: literal-only call parsing, canonical source, and rejection reasons."""

import pytest

from coevolve_lib.core.safe_calls import (
    MAX_SOURCE_CHARS,
    Call,
    CallParseError,
    call_from_json,
    parse_call,
    parse_call_list,
)


def test_keyword_and_positional_literals():
    call = parse_call("sort('final_report.pdf')")
    assert call == Call("sort", ("final_report.pdf",), ())
    call = parse_call("f(1, -2.5, a=None, b=True, c='x', d=-3)")
    assert call.args == (1, -2.5)
    assert call.kwargs == (("a", None), ("b", True), ("c", "x"), ("d", -3))
    assert call.kwargs_dict == {"a": None, "b": True, "c": "x", "d": -3}


def test_nested_containers():
    call = parse_call("f(a=[1, [2, {'k': (3, -4)}]], b={1, 2}, c={'x': [None]})")
    assert call.kwargs_dict == {"a": [1, [2, {"k": (3, -4)}]], "b": {1, 2}, "c": {"x": [None]}}


def test_to_source_is_canonical_and_round_trips():
    call = parse_call("mv( source = 'a.txt',destination=\"b\" )")
    assert call.to_source() == "mv(source='a.txt', destination='b')"
    weird = parse_call("f('it\\'s \"quoted\"\\n', x=[1.5, -0.0, {'a': (1,)}])")
    assert parse_call(weird.to_source()) == weird
    assert parse_call("ls()").to_source() == "ls()"


def test_allowed_names():
    assert parse_call("ls()", allowed_names={"ls"}).name == "ls"
    with pytest.raises(CallParseError, match="unknown function 'rm'"):
        parse_call("rm(file_name='x')", allowed_names={"ls"})


@pytest.mark.parametrize("text, reason", [
    ("os.system('ls')", "plain function name"),
    ("a[0]()", "plain function name"),
    ("f()()", "plain function name"),
    ("__import__('os')", "dunder"),
    ("f(*args)", r"\*args"),
    ("f(**kw)", r"\*\*kwargs"),
    ("f(a=g())", "nested call"),
    ("f(a=x)", "variable name"),
    ("f(a=lambda: 1)", "lambda"),
    ("f(a=f'{x}')", "f-string"),
    ("f(a=().__class__)", "attribute"),
    ("f(a=1+2)", "BinOp"),
    ("f(a=-'x')", "sign applies only to a number"),
    ("f(a=b'x')", "unsupported literal type bytes"),
    ("f(a=1e999)", "non-finite"),
    ("f(a={**d})", r"\*\* inside a dict"),
    ("f(a={[1]: 2})", "unhashable"),
    ("f(a=[x for x in y])", "ListComp"),
    ("f(a=(y := 1))", "assignment expression"),
    ("f(a=1, a=2)", "repeated"),
    ("f(a=1", "invalid syntax"),
    ("import os", "invalid syntax"),
    ("", "empty input"),
    ("f('\x00')", "null byte"),
    ("f(a='\ud800')", "unparsable"),
    ("x" * (MAX_SOURCE_CHARS + 1), "longer than"),
    ("f(a=" + "[" * 40 + "]" * 40 + ")", "nested deeper"),
    ("f(a=" + "[" * 10000 + "]" * 10000 + ")", "invalid syntax|unparsable"),
    ("42", "not a function call"),
])
def test_rejections_have_reasons(text, reason):
    with pytest.raises(CallParseError, match=reason):
        parse_call(text)


def test_non_string_input_is_rejected():
    with pytest.raises(CallParseError, match="expected a string"):
        parse_call(b"ls()")


def test_parse_call_list_forms():
    calls, errors = parse_call_list("[cd(folder='document'), ls()]")
    assert [c.to_source() for c in calls] == ["cd(folder='document')", "ls()"] and errors == []
    assert parse_call_list("ls(a=True)")[0] == [Call("ls", (), (("a", True),))]
    assert len(parse_call_list("(ls(), pwd())")[0]) == 2
    assert parse_call_list("```\n[ls()]\n```")[0] == [Call("ls")]
    assert parse_call_list("[]") == ([], [])


def test_parse_call_list_keeps_good_calls_and_reports_bad_ones():
    calls, errors = parse_call_list("[ls(), os.system('x'), pwd(), rm_rf()]", allowed_names={"ls", "pwd"})
    assert [c.name for c in calls] == ["ls", "pwd"]
    assert len(errors) == 2 and errors[0].startswith("call 1:") and "unknown function 'rm_rf'" in errors[1]


def test_parse_call_list_on_prose():
    calls, errors = parse_call_list("I have moved the file for you.")
    assert calls == [] and len(errors) == 1
    calls, errors = parse_call_list("{'a': 1}")
    assert calls == [] and "not a call or a list of calls" in errors[0]


def test_call_from_json():
    call = call_from_json("mv", '{"source": "a", "destination": "b"}', allowed_names={"mv"})
    assert call.to_source() == "mv(source='a', destination='b')"
    assert call_from_json("ls", None) == Call("ls")
    assert call_from_json("ls", {"a": True}).kwargs == (("a", True),)
    for name, arguments, reason in [
        ("ls", "{not json", "not valid JSON"),
        ("ls", "[1, 2]", "JSON object"),
        ("os.system", {}, "invalid function name"),
        ("__import__", {}, "invalid function name"),
        ("rm", {}, "unknown function"),
        ("ls", {"bad key": 1}, "invalid argument name"),
        ("ls", '{"a": ' + "[" * 50 + "]" * 50 + "}", "nested deeper"),
        ("ls", '{"a": Infinity}', "non-finite"),
        # issue 29: what would not read back from the recorded source
        ("ls", {"class": 1}, "invalid argument name"),
        ("ls", {"\uff50": 1}, "invalid argument name"),  # full-width p: read back as `p`
        ("ls", {"a": "\x00" * 30_000}, "source would be longer"),  # each character written as 4
    ]:
        with pytest.raises(CallParseError, match=reason):
            call_from_json(name, arguments, allowed_names={"ls"})


def test_math_guard_reads_a_string_precision_as_mpmath_does():
    """BFCL's `logarithm` sets `mpmath.mp.dps = precision`, which takes int(precision): the string '1000000' ran past
    120 s. The guard refuses it as it refuses 1000000; a small one still runs, and one int() rejects fails at once,
    as in BFCL. (`square_root`'s `decimal` precision takes integers only: a string is BFCL's own error.)"""
    from coevolve_lib.envs.bfcl.benchmark import BFCLEnv

    env = BFCLEnv.from_config({}, ["MathAPI"])
    refused = ["logarithm(value=2, base=3, precision='1000000')", "logarithm(2, 3, ' 1_000_000 ')",
               "logarithm(value=2, base=3, precision='１０００００００')",
               "logarithm(value=2, base=3, precision=1000000)"]
    for call in refused:
        [observation] = env.execute([call])
        assert observation.startswith("Error during execution: precision") and "over the limit" in observation, call
    [small] = env.execute(["logarithm(value=2, base=3, precision='20')"])
    assert small.startswith("{'result': mpf('0.6309297535714574370")
    [not_int] = env.execute(["logarithm(value=2, base=3, precision='1e6')"])
    assert "invalid literal for int()" in not_int
    [root] = env.execute(["square_root(number=2, precision='1000000')"])
    assert root == '{"error": "Input must be a number or computation resulted in an invalid operation"}'


def test_every_accepted_call_reads_back_as_itself():
    """What the kit records (`to_source`) is what its parser accepts: an escape-heavy call whose source would pass
    the length limit is refused when parsed, not recorded unreadable."""
    with pytest.raises(CallParseError, match="source would be longer"):
        parse_call("ls(a='" + "\\0" * 40_000 + "')")  # 80k characters, written back as 160k
    for text in ["ls(a='\\0' * 1)".replace(" * 1", ""), "f(x={1: 'a', True: 'b'}, y=(1,), z=-0.0)",
                 "f(ｐ=1)", "g('\\U0001F600', [[[]]], {'k': {2, 3}})"]:
        call = parse_call(text)
        assert parse_call(call.to_source()) == call
