"""Toy Markov-model experiments (measured beside exact theory) and their plots."""
