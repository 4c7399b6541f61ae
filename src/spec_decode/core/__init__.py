"""The exact sampler itself, numpy only: models, warps, the chain and tree rules, the trace and
the one generation loop. Randomness enters only through ``core.randomness``; acceptance is
decided only in ``core.rules`` and ``core.tree_rules``; cost is counted only in ``core.trace``."""
