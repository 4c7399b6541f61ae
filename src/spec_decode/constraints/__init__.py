"""Constrained output: grammars (JSON schemas, tool calls) as mask processors along the drafted
path, on llguidance (the ``[serve]`` extra)."""
