"""Serving: one engine loaded once for many generations (:mod:`.engine`), and the
OpenAI-compatible HTTP server around it (:mod:`.server`, ``[serve]`` extra: FastAPI, uvicorn,
sse-starlette, prometheus-client), which runs generations one at a time on a worker thread
(:mod:`.worker`). Above ``backends`` and ``drafting`` in the layers; only ``cli`` imports it."""
