"""Adapters from real model libraries to the :class:`spec_decode.core.models.Model` interface.

Each backend lives in its own module so its heavy dependencies load only when it is used:
``from spec_decode.backends.transformers import TransformersModel`` (needs the ``[hf]`` extra).
"""
