"""Audits in a child process, so the code under test can neither end nor outlast them.

An in-process audit trusts the code it judges: a rule that raises ``SystemExit(0)`` ends it with
exit status 0 and no verdict, one that never returns hangs it. Here the code under test runs in
a child started with multiprocessing's "spawn" context (a fresh interpreter: no state, locks or
threads inherited), and the parent only reads the child's messages:

* each case's start and result, for progress, and the report at the end;
* the child ignores SIGINT, so a ``KeyboardInterrupt`` in it can only come from the code under
  test, and is a FAIL naming the case, like a ``SystemExit`` or any other crash. The user's own
  Ctrl-C reaches the parent, which stops the child;
* the child's standard output goes to standard error, so what the code under test prints
  cannot corrupt the parent's output (``--json``);
* past :data:`CASE_TIMEOUT` seconds on one case (importing the code counts as a case; the
  child's own start-up does not), or :data:`AUDIT_TIMEOUT` in all,
  the parent kills the child; a child that dies (``os._exit``, a signal, out of memory) is
  noticed when its pipe closes. Either way the verdict is ERROR, naming the case that was
  running: no verdict was reached, and an ERROR is never a PASS.

Code given as ``"module:attribute"`` is imported in the child (the current directory first on
the path), so even importing it cannot hang or end the parent; an import that fails is
:class:`UnusableCode`, a ValueError naming the option it came from.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import multiprocessing
import os
import pickle
import signal
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from types import TracebackType
from typing import Any

from spec_decode.certify.grid import AuditCase, pick_cases
from spec_decode.certify.in_process import audit_here
from spec_decode.certify.report import (
    CASE_SECONDS,
    AuditReport,
    AuditSettings,
    CaseResult,
    StartCallback,
)

#: Wall-clock seconds one case may run before the code under test is stopped: well above the
#: enumeration's own budget (:data:`~spec_decode.certify.report.CASE_SECONDS` of CPU time, past
#: which a case turns statistical) even when a busy machine gives the child a fraction of a
#: core, so only code that hangs, or is far slower than any engine's sampler, meets it.
CASE_TIMEOUT = 5 * CASE_SECONDS
#: Seconds a whole audit (every entry of the zoo together) may run.
AUDIT_TIMEOUT = 3600.0

#: The longest single wait on the child's pipe; longer limits (infinity included) are waited
#: out in slices of this.
_POLL_SECONDS = 60.0

#: What is audited: a callable or object, or "module:attribute" to import in the child.
Code = Callable[..., Any] | object | str | None


class UnusableCode(ValueError):
    """The code under test cannot be audited (not importable, no such case): ``option`` names
    where it came from, for the command line's exit status 2."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option


#: Short names for the code this project ships to audit: ``zoo:NAME`` (the re-created engine
#: bugs and their exact controls) and ``hf:NAME`` (Hugging Face's own verification functions).
ALIASES = {
    "zoo": "spec_decode.certify.zoo",
    "hf": "spec_decode.certify.third_party.transformers_rule",
}


def split_spec(spec: str, option: str) -> tuple[str, str]:
    """``module:attribute`` as its two parts (a module named in :data:`ALIASES` replaced by the
    module it stands for), or :class:`UnusableCode`."""
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise UnusableCode(option, f"expected module:attribute, got {spec!r}")
    return ALIASES.get(module_name, module_name), attribute


def import_code(spec: str, option: str) -> object:
    """Import ``module:attribute`` (the current directory first on the path), or raise
    :class:`UnusableCode` with a clear message, whatever importing the module raised."""
    module_name, attribute = split_spec(spec, option)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except SyntaxError as error:
        where = f"{error.filename}:{error.lineno}"
        raise UnusableCode(
            option, f"cannot import {module_name!r}: syntax error at {where}: {error.msg}"
        ) from error
    except BaseException as error:  # any failure while importing user code, exits included
        raise UnusableCode(
            option, f"cannot import {module_name!r}: {type(error).__name__}: {error}"
        ) from error
    if not hasattr(module, attribute):
        raise UnusableCode(option, f"{module_name!r} has no attribute {attribute!r}")
    return getattr(module, attribute)


@dataclass(frozen=True)
class AuditJob:
    """One audit to run in the child: the code (objects, or specs imported there), the cases
    (given, or picked there from the grid by index or name, since the grid depends on the
    drafter's vocabulary) and the settings."""

    rule: Code = None
    drafter: Code = None
    tree_rule: Code = None
    cases: Sequence[AuditCase] | None = None
    picks: Sequence[str] = ()
    settings: AuditSettings = field(default_factory=AuditSettings)


class IsolatedAuditor:
    """Runs :class:`AuditJob` s in one child process, restarted after a job that had to be
    stopped; ``timeout`` covers every job this auditor runs. Use it as a context manager, so
    the child is stopped whatever happens in the parent."""

    def __init__(self, case_timeout: float | None = None, timeout: float | None = None) -> None:
        self.case_timeout = CASE_TIMEOUT if case_timeout is None else case_timeout
        self.timeout = AUDIT_TIMEOUT if timeout is None else timeout
        if not self.case_timeout > 0 or not self.timeout > 0:
            raise ValueError(
                f"time limits must be > 0 s, got case_timeout={self.case_timeout:g}, "
                f"timeout={self.timeout:g}"
            )
        self.deadline = time.monotonic() + self.timeout
        self.process: multiprocessing.process.BaseProcess | None = None
        self.connection: Connection | None = None

    def __enter__(self) -> IsolatedAuditor:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop the child, if one runs."""
        if self.connection is not None:
            self.connection.close()
        if self.process is not None:
            self.process.kill()
            self.process.join()
        self.process = self.connection = None

    def audit(
        self,
        job: AuditJob,
        on_start: StartCallback | None = None,
        on_case: Callable[[CaseResult], None] | None = None,
    ) -> AuditReport:
        """The report on ``job``; ERROR when the child had to be stopped or died."""
        method = "statistical" if job.settings.statistical else "exhaustive"
        running = "the set-up before the first case (starting the child, importing the code)"
        results: list[CaseResult] = []
        if time.monotonic() >= self.deadline:
            return self._error(method, f"not run: {self._overall()} was reached", results)
        fresh = self.process is None or not self.process.is_alive()
        connection = self._send(job)
        # A fresh child's clock starts once its interpreter is up ("ready"); only --timeout
        # bounds the start-up, so a small per-case limit is not spent on importing numpy.
        case_deadline = math.inf if fresh else time.monotonic() + self.case_timeout
        while True:
            wait = min(case_deadline, self.deadline) - time.monotonic()
            if not connection.poll(min(max(wait, 0.0), _POLL_SECONDS)):
                if wait > _POLL_SECONDS:  # a limit far off (or infinite): wait on
                    continue
                limit = (
                    f"the per-case time limit of {self.case_timeout:g} s (--case-timeout)"
                    if case_deadline <= self.deadline
                    else self._overall()
                )
                self.close()
                problem = (
                    f"no verdict: {running} ran past {limit}; the code under test was stopped "
                    f"(it hangs, or is too slow for the limit)"
                )
                return self._error(method, problem, results)
            try:
                message = connection.recv()
            except (EOFError, OSError):
                status = self._ended()
                problem = (
                    f"no verdict: the process running the code under test ended ({status}) "
                    f"during {running}"
                )
                return self._error(method, problem, results)
            kind = message[0]
            if kind == "report":
                return message[1]
            if kind == "unusable":
                raise UnusableCode(message[1], message[2])
            case_deadline = time.monotonic() + self.case_timeout
            if kind == "start":
                running, method = f"case {message[1]!r}", message[2]
                if on_start is not None:
                    on_start(message[1], message[2])
            elif kind == "case":
                results.append(message[1])
                if on_case is not None:
                    on_case(message[1])

    def _send(self, job: AuditJob) -> Connection:
        """Hand ``job`` to the child, starting one first if none runs."""
        try:
            payload = pickle.dumps(job)
        except (pickle.PicklingError, AttributeError, TypeError) as error:
            raise ValueError(
                "the code under test must be picklable to run in a child process (a "
                "module-level function or object, or a 'module:attribute' string); audit it "
                f"with isolate=False instead: {error}"
            ) from error
        if self.process is None or not self.process.is_alive():
            self.close()
            context = multiprocessing.get_context("spawn")
            parent, child = context.Pipe()
            self.process = context.Process(target=_child_main, args=(child,), daemon=True)
            self.process.start()
            child.close()
            self.connection = parent
        assert self.connection is not None
        self.connection.send_bytes(payload)
        return self.connection

    def _ended(self) -> str:
        """How the child ended, once its pipe closed."""
        assert self.process is not None
        self.process.join(5.0)
        code = self.process.exitcode
        self.close()
        if code is None:
            return "its pipe closed while it still ran"
        if code < 0:
            return f"killed by signal {signal.Signals(-code).name}"
        return f"exit status {code}"

    def _overall(self) -> str:
        return f"the audit's time limit of {self.timeout:g} s (--timeout)"

    @staticmethod
    def _error(method: str, problem: str, results: list[CaseResult]) -> AuditReport:
        return AuditReport("ERROR", method, problem=problem, cases=results)


def _child_main(connection: Connection) -> None:
    """The child: run each job received and send its messages, until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    connection.send(("ready",))
    with contextlib.suppress(AttributeError, OSError, ValueError):  # no stdout/stderr at all
        sys.stdout.flush()
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    while True:
        try:
            job = pickle.loads(connection.recv_bytes())
        except (EOFError, OSError):
            return
        connection.send(_run_job(job, connection.send))


def _run_job(job: AuditJob, send: Callable[[tuple[Any, ...]], None]) -> tuple[Any, ...]:
    """The job's final message: ("report", report) or ("unusable", option, message)."""
    try:
        rule, drafter, tree_rule = (
            import_code(code, option) if isinstance(code, str) else code
            for code, option in (
                (job.rule, "RULE"),
                (job.drafter, "--drafter"),
                (job.tree_rule, "--tree-rule"),
            )
        )
        vocab = getattr(drafter, "vocab_size", None)
        cases = job.cases
        if cases is None and job.picks:
            try:
                cases = pick_cases(job.picks, job.settings.seed, vocab)
            except ValueError as error:
                raise UnusableCode("--case", str(error)) from error
    except UnusableCode as error:
        return ("unusable", error.option, str(error))
    report = audit_here(
        rule,
        drafter,
        tree_rule,
        job.settings,
        cases,
        on_start=lambda name, method: send(("start", name, method)),
        on_case=lambda result: send(("case", result)),
        crashes=(BaseException,),
    )
    return ("report", report)
