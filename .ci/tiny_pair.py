"""Write a tiny random GGUF target/draft pair with a chat template into the folder given, for
the install matrix's smoke runs of ``generate`` and ``serve`` (run with a venv that has the
``gguf`` package: the ``hf`` extra). Text prompts tokenize letter by letter."""

from __future__ import annotations

import sys
from pathlib import Path

from spec_decode.certify.tiny_gguf import TOKENS, perturbed, tiny_weights, write_gguf

VOCABULARY = [*TOKENS[:4], *(chr(c) for c in range(ord("a"), ord("z") + 1))]
CHAT_TEMPLATE = (
    "{% for message in messages %}{{ message['role'][0] }} {{ message['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}a {% endif %}"
)


def main(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    target = tiny_weights(0, logit_scale=6.0, vocab=len(VOCABULARY))
    target["output.weight"][2] = 0.0  # EOS is never the likeliest: runs reach their limit
    options = {"context": 512, "chat_template": CHAT_TEMPLATE}
    write_gguf(folder / "target.gguf", target, VOCABULARY, **options)
    write_gguf(folder / "draft.gguf", perturbed(target, 1, 0.05), VOCABULARY, **options)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
