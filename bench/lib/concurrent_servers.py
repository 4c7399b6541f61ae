"""The servers the concurrent benchmarks compare (``bench/serving/concurrent_users.py``,
``second_user.py``): llama-server ``-np N`` target-only and ngram-simple, ours with and without
drafting, and ours from another checkout (``--before``); each started fresh on a free port."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shlex
import tempfile
from pathlib import Path

from bench.lib.serve_client import BASELINE, NGRAM, Variant, server_command
from bench.lib.servers import Server
from spec_decode.backends import assembly, registry
from spec_decode.certify.local_server import free_port

OURS, OURS_PLAIN = "ours default", "ours target-only"
#: The name suffix of ours from another checkout (``--before``), run beside ours.
BEFORE = " (before)"


def variants(args: argparse.Namespace) -> list[Variant]:
    """llama-server target-only and ngram-simple, and ours with and without drafting (what
    speculation adds on our own server), each with ``--slots`` slots; with ``--before``, ours
    twice more, from that checkout."""
    fields = {"ignore_eos": True} if args.ignore_eos else {}
    ours = ("--parallel", str(args.slots), *shlex.split(args.ours_args))
    theirs = tuple(shlex.split(args.llama_args))
    chosen = [
        Variant(BASELINE, "llama-server", theirs, fields),  # -np: see Servers.fresh
        Variant(NGRAM, "llama-server", (*theirs, "--spec-type", "ngram-simple"), fields),
        Variant(OURS_PLAIN, "ours", (*ours, "--draft", "none"), fields),
        Variant(OURS, "ours", ours, fields),
    ]
    if args.before:  # the same, served by another checkout
        chosen += [dataclasses.replace(v, name=v.name + BEFORE) for v in chosen[2:]]
    if args.variants:
        wanted = [name.strip() for name in args.variants.split(";")]
        unknown = set(wanted) - {v.name for v in chosen}
        if unknown:
            raise SystemExit(f"unknown variants {sorted(unknown)}: {[v.name for v in chosen]}")
        chosen = [v for v in chosen if v.name in wanted]
    return chosen


class Servers:
    """Fresh servers of every variant: one started per call of :meth:`fresh`, its log in a
    temporary folder; the seconds each took to start."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.target = args, assembly.gguf_file(registry.DEFAULT_TARGET)
        self.logs = Path(tempfile.mkdtemp(prefix="concurrent-bench-"))
        self.env = dict(os.environ) | args.env
        self.started: dict[str, list[float]] = {}
        self.commands: dict[str, str] = {}

    def fresh(self, variant: Variant) -> Server:
        """``variant``'s server, started on a free port."""
        port = free_port()
        ctx = self.args.ctx * self.args.slots  # llama-server splits -c among its slots
        command = server_command(
            variant,
            target=self.target,
            port=port,
            threads=self.args.threads,
            ctx=ctx,
            llama_server=self.args.llama_server,
            ours_command=self.args.before
            if variant.name.endswith(BEFORE)
            else self.args.ours_command,
        )
        if variant.engine == "llama-server":  # server_command gives it one slot
            command[command.index("-np") + 1] = str(self.args.slots)
        self.commands.setdefault(variant.name, shlex.join(command))
        n = sum(len(v) for v in self.started.values())
        server = Server(command, port, self.logs / f"{n}.log", self.env)
        try:
            seconds = server.start(self.args.start_timeout)
        except BaseException:  # interrupted or failed while starting: no process left behind
            server.stop()
            raise
        self.started.setdefault(variant.name, []).append(seconds)
        return server
