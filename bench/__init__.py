"""spec-decode's benchmarks: scripts grouped by what they measure (``toy``, ``kernels``,
``speed``, ``serving``, ``constrained``, ``exactness``), sharing code only through
:mod:`bench.lib`; results in ``bench/results``. Run a script from the repository root as
``python bench/GROUP/NAME.py``."""
