"""llama.cpp's own engines, timed on one prompt: its command-line tools (``llama-completion``,
``llama-speculative``, with their own timings) and llama-cpp-python's generation loop."""

from __future__ import annotations

import re
import subprocess
import tempfile
import time


def run_binary(args: list[str], prompt_text: str, tokens: int) -> dict[str, object]:
    """Run a llama.cpp tool on the prompt; its generated text and its own timings."""
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as file:
        file.write(prompt_text)
        file.flush()
        done = subprocess.run(
            [*args, "-f", file.name, "-n", str(tokens), "--ignore-eos", "-c", "4096"],
            capture_output=True,
            text=True,
            check=True,
        )
    log = done.stderr
    if "llama-speculative" in args[0]:
        encoded = float(re.search(r"encoded\s+\d+ tokens in\s+([\d.]+) seconds", log).group(1))
        decoded = re.search(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds", log)
        accept = re.search(r"accept\s+=\s+([\d.]+)%", log)
        return {
            "generated": int(decoded.group(1)),
            "seconds": encoded + float(decoded.group(2)),
            "acceptance_rate": float(accept.group(1)) / 100 if accept else None,
            "text": done.stdout,
        }
    total_ms = float(re.search(r"total time =\s+([\d.]+) ms", log).group(1))
    return {"generated": tokens, "seconds": total_ms / 1e3, "text": done.stdout}


def run_llama_python(
    llm: object, prompt_ids: list[int], temperature: float, tokens: int, seed: int
) -> dict[str, object]:
    """llama-cpp-python's own loop: ``Llama.generate`` with plain temperature sampling."""
    llm.reset()
    llm.set_seed(seed)
    out: list[int] = []
    start = time.perf_counter()
    for token in llm.generate(
        prompt_ids, temp=temperature, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.0
    ):
        out.append(int(token))
        if len(out) == tokens:
            break
    return {"tokens": out, "generated": len(out), "seconds": time.perf_counter() - start}
