"""Tool calls read from the model's text, whole and streamed: calls parsed in order, content kept,
a block that is not a call left as it was written."""

from __future__ import annotations

import json

from spec_decode.serving.tool_calls import ToolCallText, split_tool_calls, template_messages

CALL = '<tool_call>\n{"name": "read", "arguments": {"path": "a.py"}}\n</tool_call>'
TWO = CALL + '\n<tool_call>\n{"name": "run", "arguments": {}}\n</tool_call>'


def test_calls_are_parsed_in_order_and_the_content_kept():
    content, calls = split_tool_calls("Reading it.\n" + TWO)
    assert content == "Reading it."
    assert [(c.name, json.loads(c.arguments)) for c in calls] == [
        ("read", {"path": "a.py"}),
        ("run", {}),
    ]
    assert len({c.id for c in calls}) == 2
    assert calls[0].as_openai(0)["function"] == {"name": "read", "arguments": calls[0].arguments}


def test_a_block_that_is_not_a_call_stays_content():
    for block in (
        "<tool_call>not json</tool_call>",
        '<tool_call>{"arguments": {}}</tool_call>',
        '<tool_call>{"name": "f", "arguments": "x"}</tool_call>',
        "no call at all",
    ):
        assert split_tool_calls(block) == (block, [])


def test_streamed_text_releases_content_and_holds_back_calls():
    text = "Reading it.\n" + TWO + "\n"
    for size in (1, 2, 3, 5, 11, len(text)):
        stream, released = ToolCallText({"read", "run"}), ""
        for start in range(0, len(text), size):
            piece = stream.add(text[start : start + size])
            assert "<" not in piece  # a marker's first characters are held back
            released += piece
        rest, calls = stream.finish()
        assert released == "Reading it.\n" and rest == "" and len(calls) == 2


def test_a_held_back_prefix_that_is_no_call_is_released():
    stream = ToolCallText({"read"})
    assert stream.add("a <tool") == "a "
    assert stream.add("kit> b") == "<toolkit> b"
    assert stream.finish() == ("", [])


def test_assistant_calls_reach_the_template_with_object_arguments():
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}}
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "tool_calls": [call]}]
    rendered = template_messages(messages)
    assert rendered[1]["tool_calls"][0]["function"]["arguments"] == {"x": 1}
    assert messages[1]["tool_calls"][0]["function"]["arguments"] == '{"x": 1}'  # not changed


FENCED = '```json\n{\n  "name": "read",\n  "arguments": {\n    "path": "a.py"\n  }\n}\n```'


def test_an_answer_that_is_one_call_object_is_that_call():
    for answer in (FENCED, "  " + FENCED + "\n", '{"name": "read", "arguments": {"path": "a.py"}}'):
        content, calls = split_tool_calls(answer, {"read"})
        assert content == "" and [(c.name, json.loads(c.arguments)) for c in calls] == [
            ("read", {"path": "a.py"})
        ]
    assert split_tool_calls(FENCED, {"write"}) == (FENCED, [])  # not one of the tools
    assert split_tool_calls(FENCED) == (FENCED, [])  # no tools at all
    assert split_tool_calls("Here:\n" + FENCED, {"read"})[1] == []  # not the whole answer


def test_a_streamed_whole_answer_call_is_held_back_and_other_code_is_not():
    for size in (1, 4, 9):
        stream = ToolCallText({"read"})
        released = "".join(stream.add(FENCED[i : i + size]) for i in range(0, len(FENCED), size))
        assert released == "" and len(stream.finish()[1]) == 1
    python = "```python\nprint(1)\n```"
    stream = ToolCallText({"read"})
    released = "".join(stream.add(python[i : i + 3]) for i in range(0, len(python), 3))
    assert released + stream.finish()[0] == python and released.startswith("```python\n")
    other = ToolCallText({"read"})
    assert other.add('{"a": 1}') == "" and other.finish() == ('{"a": 1}', [])
