"""What the benchmark scripts share, one job a module:

* :mod:`~bench.lib.machine`: the machine a run was on, recorded inside its results;
* :mod:`~bench.lib.results`: where results go and writing them (``STEM.json`` and ``STEM.md``);
* :mod:`~bench.lib.prompt_sets`: public prompt sets, sampled with a seed;
* :mod:`~bench.lib.handwritten`: the hand-written prompts and settings of the transformers runs;
* :mod:`~bench.lib.pair`: loading the packaged pair on the transformers backend;
* :mod:`~bench.lib.records`: one timed run's record, ours or Hugging Face's;
* :mod:`~bench.lib.repetitions`: the interleaved repetition loop;
* :mod:`~bench.lib.summaries`: medians over repetitions and greedy identity;
* :mod:`~bench.lib.ours`: one timed run of ours in process;
* :mod:`~bench.lib.hf`: one timed run of Hugging Face's ``generate``, its passes counted;
* :mod:`~bench.lib.servers`: a server subprocess with an OpenAI client;
* :mod:`~bench.lib.serve_client` and :mod:`~bench.lib.serve_report`: the serving benchmark's
  client side (variants, a streamed turn, a session) and its report;
* :mod:`~bench.lib.llamacpp_engines` and :mod:`~bench.lib.cpu_report`: llama.cpp's own engines
  timed on a prompt, and the CPU benchmark's report;
* :mod:`~bench.lib.block_agreement` and :mod:`~bench.lib.gpu_report`: block against one-token
  scores on a transformers model, and the GPU benchmark's report;
* :mod:`~bench.lib.audit_rows`: the verdict and evidence columns every engine-audit table shares;
* :mod:`~bench.lib.summary`: BENCHMARKS.md's opening table from the canonical results;
* :mod:`~bench.lib.ggml`: raw ggml access (tensor struct, ggml-base) for the kernel probes;
* :mod:`~bench.lib.plots`: plot parts shared by the figures.

Scripts put the repository root on ``sys.path`` (one line, before importing from here), so
that ``python bench/GROUP/NAME.py`` runs from any directory.
"""
