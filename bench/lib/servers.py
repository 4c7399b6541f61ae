"""A server process on 127.0.0.1 for the benchmarks (llama-server, ``spec-decode serve``):
:class:`~spec_decode.certify.local_server.LocalServer`, with an OpenAI client for it."""

from __future__ import annotations

import openai

from spec_decode.certify.local_server import LocalServer


class Server(LocalServer):
    """A server process on 127.0.0.1:``port``, its log in ``log``; ``start`` waits for health."""

    def client(self) -> tuple[openai.OpenAI, str]:
        """An OpenAI client for this server and the model id it serves."""
        client = openai.OpenAI(
            base_url=f"{self.base}/v1", api_key="none", timeout=900, max_retries=0
        )
        return client, client.models.list().data[0].id
