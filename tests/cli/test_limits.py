"""Every size bounded: absurd tokens, k, pairs, vocabularies, trees and threads are refused up
front (exit 2, the limit named), and text that is not UTF-8 is refused clearly."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from spec_decode.backends.cores import available_cores
from spec_decode.certify.closed_form import certify_closed_form
from spec_decode.cli.app import app
from spec_decode.cli.options import (
    Threads,
    check_threads,
    check_tree_shape,
    prompt_text,
)
from spec_decode.core.tree import TreeShape
from spec_decode.toy.experiments import ToySetup, run_experiment, run_tree_experiment

runner = CliRunner()


def plain(output: str) -> str:
    """The output's words, without the error panel's borders and line breaks."""
    return " ".join(output.translate(str.maketrans("", "", "│╭╮╰╯─")).split())


@pytest.mark.parametrize(
    ("args", "limit"),
    [
        (["run", "--tokens", str(10**12)], "1000000"),
        (["sweep", "--tokens", str(10**12)], "1000000"),
        (["sweep", "--k", str(10**6)], "limit of 1024"),
        (["sweep", "--k", "200", "--tokens", "1000"], "limit of 1,000,000"),
        (["verify", "--pairs", str(10**12)], "1000000"),
        (["sweep", "--vocab", str(10**7)], "limit of 16,777,216"),
        (["run", "--order", str(10**6)], "limit of 16,777,216"),
        (["run", "--policy", "cost", "--k-max", str(10**9)], "limit of 1024"),
        (["run", "--tree", "2,x"], "comma-separated integers"),
    ],
)
def test_absurd_sizes_exit_2_naming_the_limit(args, limit):
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert limit in plain(result.output)


def test_the_library_bounds_the_pairs_too():
    with pytest.raises(ValueError, match="limit of 1,000,000"):
        certify_closed_form(10**12)


def test_a_plot_into_a_directory_is_refused_before_the_sweep(tmp_path):
    result = runner.invoke(app, ["sweep", "--plot", str(tmp_path)])
    assert result.exit_code == 2
    assert "is a directory" in plain(result.output)


def test_the_plot_message_names_the_file_written(tmp_path):
    pytest.importorskip("matplotlib")
    result = runner.invoke(app, ["sweep", "--k", "1", "--tokens", "10", "--plot", f"{tmp_path}/a"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "a.png").stat().st_size > 0
    assert f"written to {tmp_path}/a.png" in "".join(result.output.split("\n"))


def test_toy_runs_report_progress_token_by_token():
    seen: list[int] = []
    result = run_experiment(ToySetup(), 0.8, 4, 300, 0.1, 0, on_tokens=seen.extend)
    assert len(seen) == result.tokens == 300
    seen.clear()
    run_tree_experiment(ToySetup(), 0.8, (2, 1), 100, 0.1, 0, on_tokens=seen.extend)
    assert len(seen) == 100


def test_trees_above_a_backends_leaves_are_refused_before_loading():
    assert check_tree_shape(TreeShape((8, 8)), max_leaves=64).widths == (8, 8)
    with pytest.raises(typer.BadParameter, match="81 leaves"):
        check_tree_shape(TreeShape((9, 9)), max_leaves=64)
    with pytest.raises(typer.BadParameter, match="980,199 nodes"):
        check_tree_shape(TreeShape((99, 99, 99)))


def tiny_app() -> typer.Typer:
    """A command taking the shared --threads option and reading its prompt like generate."""
    tiny = typer.Typer()

    @tiny.command()
    def main(threads: Threads = None, prompt: str | None = None) -> None:
        typer.echo(f"threads={threads} prompt={prompt_text(prompt)!r}")

    return tiny


def test_threads_are_bounded_by_the_cores_available():
    cores = available_cores()
    assert check_threads(cores) == cores and check_threads(None) is None
    result = runner.invoke(tiny_app(), ["--threads", str(cores + 1), "--prompt", "x"])
    assert result.exit_code == 2
    assert "--threads" in result.output and f"{cores} cores" in result.output
    thousand = runner.invoke(tiny_app(), ["--threads", "1000", "--prompt", "x"])
    assert thousand.exit_code == 2


def test_a_prompt_that_is_not_utf8_is_refused_with_the_byte_named():
    result = runner.invoke(tiny_app(), [], input=b"caf\xe9 au lait")
    assert result.exit_code == 2
    assert "standard input is not UTF-8: byte 0xe9 at offset 3" in plain(result.output)
    fine = runner.invoke(tiny_app(), [], input="café".encode())
    assert fine.exit_code == 0 and "'café'" in fine.output
    with pytest.raises(typer.BadParameter, match="--prompt is not UTF-8: byte 0xff"):
        prompt_text("ab\udcff")  # how a non-UTF-8 argument reaches Python


@pytest.mark.parametrize("sdist", ["/nonexistent/llama_cpp_python.tar.gz", "."])
def test_build_kernels_refuses_an_sdist_that_is_not_a_file_before_anything_else(sdist):
    """Even with a build already cached (which it would otherwise report and keep)."""
    result = runner.invoke(app, ["build-kernels", "--sdist", sdist])
    assert result.exit_code == 2, result.output
    assert "--sdist" in result.output
