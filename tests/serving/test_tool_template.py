"""Tools and tool messages through the packaged Qwen2.5 chat template (a copy of the GGUF's, in
``qwen25_chat_template.jinja``): our renderer (what the llama.cpp backend uses) writes exactly the
text transformers writes, so both backends, and llama-server ``--jinja``, prompt the same."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("transformers")

from spec_decode.backends.prompts import render_chat_template
from spec_decode.serving.tool_calls import template_messages

TEMPLATE = (Path(__file__).parent / "qwen25_chat_template.jinja").read_text()
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file <exactly> as it is & return it",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string", "description": "Ünïcode path"}},
                "required": ["path"],
            },
        },
    }
]
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "read_file", "arguments": '{"path": "a.py"}'},
}
CONVERSATIONS = {
    "a question": [{"role": "user", "content": "What is in a.py?"}],
    "with a system message": [
        {"role": "system", "content": "You edit code."},
        {"role": "user", "content": "What is in a.py?"},
    ],
    "after a call and its result": [
        {"role": "user", "content": "What is in a.py?"},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "print('hi')"},
    ],
}


def transformers_rendering(messages, tools) -> str:
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    words = Tokenizer(WordLevel({"<unk>": 0}, unk_token="<unk>"))
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=words, unk_token="<unk>", chat_template=TEMPLATE
    )
    return tokenizer.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=True
    )


@pytest.mark.parametrize("name", CONVERSATIONS)
@pytest.mark.parametrize("tools", [TOOLS, None], ids=["tools", "no tools"])
def test_our_rendering_is_transformers_rendering(name, tools):
    messages = template_messages(CONVERSATIONS[name])
    ours = render_chat_template(TEMPLATE, messages, tools=tools)
    assert ours == transformers_rendering(messages, tools)
    if tools:
        assert "<tools>" in ours and '"Read a file <exactly> as it is & return it"' in ours
