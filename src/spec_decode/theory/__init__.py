"""Exact long-run figures of speculative decoding on Markov model pairs (needs scipy): what a
rule should achieve, for the toy experiments and the benchmarks to be read against.
:mod:`~spec_decode.theory.standard` covers the standard rule (chains and trees),
:mod:`~spec_decode.theory.coupled` the coupled rule."""
