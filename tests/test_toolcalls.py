"""Parsing model replies in the two tool-call formats: data in, `Call`s out, nothing evaluated."""

from coevolve_lib.envs.bfcl.episode import prompt_style_system_prompt
from coevolve_lib.envs.bfcl.tasks import load_tasks
from coevolve_lib.rollout import toolcalls


def test_native_blocks_become_calls_and_free_text_stays_content():
    text = 'Sure.<tool_call>\n{"name": "cd", "arguments": {"folder": "document"}}\n</tool_call>' \
           '<tool_call>{"name": "ls", "arguments": {}}</tool_call>'
    reply = toolcalls.parse_native(text)
    assert [c.to_source() for c in reply.calls] == ["cd(folder='document')", "ls()"]
    assert reply.content == "Sure." and not reply.errors and not reply.is_answer


def test_native_malformed_json_is_a_counted_error_not_an_answer():
    reply = toolcalls.parse_native('<tool_call>{"name": "cd", "arguments": {"folder": </tool_call>')
    assert reply.calls == [] and len(reply.errors) == 1 and "not valid JSON" in reply.errors[0]
    assert not reply.is_answer  # the model tried to call: it gets the error back and another step


def test_native_truncated_block_and_wrong_shapes():
    assert toolcalls.parse_native('<tool_call>{"name": "ls", "argu').errors
    assert toolcalls.parse_native('<tool_call>["ls"]</tool_call>').errors
    assert toolcalls.parse_native('<tool_call>{"name": "ls", "arguments": "{bad"}</tool_call>').errors


def test_native_structured_calls_from_an_endpoint():
    reply = toolcalls.parse_native("", structured=[{"name": "mkdir", "arguments": '{"dir_name": "temp"}'}])
    assert [c.to_source() for c in reply.calls] == ["mkdir(dir_name='temp')"]


def test_prompt_style_call_list_and_answers():
    reply = toolcalls.parse_prompt_style("[cd(folder='document'), mkdir(dir_name='temp')]")
    assert [c.name for c in reply.calls] == ["cd", "mkdir"]
    fenced = toolcalls.parse_prompt_style("```python\n[ls(a=True)]\n```")
    assert [c.to_source() for c in fenced.calls] == ["ls(a=True)"]
    for answer in ["The file has been moved.", "", "Use `mv` to move it: [1, 2]"]:
        assert toolcalls.parse_prompt_style(answer).is_answer


def test_prompt_style_rejects_code_as_an_error():
    reply = toolcalls.parse_prompt_style("[cd(folder=__import__('os').getcwd())]")
    assert reply.calls == [] and reply.errors and not reply.is_answer


def test_compact_docs_keep_names_and_types_and_are_much_shorter():
    task = load_tasks("v3", "base")[0]
    full = task.tools_at_turn(0)
    compact = toolcalls.compact_docs(full)
    assert [d["name"] for d in compact] == [d["name"] for d in full]
    assert compact[0]["parameters"]["properties"].keys() == full[0]["parameters"]["properties"].keys()
    assert len(str(compact)) < 0.5 * len(str(full))


def test_prompt_style_system_prompt_is_bfcls_own():
    prompt = prompt_style_system_prompt(load_tasks("v3", "base")[0].tools_at_turn(0))
    assert "[func_name1(params_name1=params_value1" in prompt and '"name": "mkdir"' in prompt
