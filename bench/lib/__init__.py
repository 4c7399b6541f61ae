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
* :mod:`~bench.lib.ggml`: raw ggml access (tensor struct, ggml-base) for the kernel probes;
* :mod:`~bench.lib.plots`: plot parts shared by the figures.

Scripts put the repository root on ``sys.path`` (one line, before importing from here), so
that ``python bench/GROUP/NAME.py`` runs from any directory.
"""
