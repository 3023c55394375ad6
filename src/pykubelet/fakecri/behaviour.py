"""How a fake container "behaves": derive exit code, lifetime and output from its command line.

The fake runtime runs no processes, but agent tests need containers that exit (to exercise restart
policies, CrashLoopBackOff, Job completion) and containers that keep running. Like a hollow node we
read intent from the argv instead of executing it:

* ``sh -c "<script>"`` (sh/bash/ash/dash, any path) interprets ``<script>``; otherwise the joined
  command + args is the script.
* The script is split into statements on ``;``, ``&&``, ``||`` and newlines (shell-quoting aware).
* A top-level ``exit N`` statement: the container exits with N after the ``sleep``s before it
  (so ``sh -c "exit 1"`` exits 1 right after start, ``sleep 2; exit 3`` exits 3 after 2 s).
* Otherwise, if every statement is one we understand (``sleep S``, ``echo ...``, ``true``, ``:``,
  ``false``), the container exits after the total sleep with the last statement's status (0, or 1
  for ``false``). ``sleep infinity`` runs forever.
* Anything else (servers, loops, no command at all → image entrypoint) runs until stopped.
* ``echo`` arguments become the container's stdout lines in its CRI log.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from dataclasses import dataclass, field

_SHELLS = {"sh", "bash", "ash", "dash", "busybox"}
_SEPARATORS = {";", "&&", "||", "\n", "&", "|"}
_SLEEP_RE = re.compile(r"^(\d+(?:\.\d*)?|\.\d+)([smhd]?)$")
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


@dataclass
class Behaviour:
    """``run_seconds`` None = runs until stopped; otherwise exits with ``exit_code`` after it."""

    run_seconds: float | None = None
    exit_code: int = 0
    output: list[str] = field(default_factory=list)


def _script_of(argv: list[str]) -> str:
    if len(argv) >= 3 and os.path.basename(argv[0]) in _SHELLS:
        rest = argv[1:]
        if os.path.basename(argv[0]) == "busybox" and rest and rest[0] in _SHELLS:
            rest = rest[1:]
        if rest and rest[0] == "-c" and len(rest) >= 2:
            return rest[1]
    return " ".join(argv)


def _statements(script: str) -> list[list[str]] | None:
    lex = shlex.shlex(script.replace("\n", " ; "), posix=True, punctuation_chars=";&|")
    lex.whitespace_split = True
    stmts: list[list[str]] = [[]]
    try:
        for tok in lex:
            if tok in _SEPARATORS or set(tok) <= set(";&|"):
                stmts.append([])
            else:
                stmts[-1].append(tok)
    except ValueError:  # unbalanced quotes: treat as an opaque long-running program
        return None
    return [s for s in stmts if s]


def _sleep_seconds(arg: str) -> float | None:
    if arg in ("infinity", "inf"):
        return math.inf
    m = _SLEEP_RE.match(arg)
    if not m:
        return None
    return float(m.group(1)) * _UNITS[m.group(2)]


def behaviour_for(command: list[str], args: list[str]) -> Behaviour:
    argv = [*command, *args]
    if not argv:
        return Behaviour()
    stmts = _statements(_script_of(argv))
    if not stmts:
        return Behaviour()
    output: list[str] = []
    elapsed = 0.0
    all_known = True
    last_code = 0
    for st in stmts:
        name = os.path.basename(st[0])
        if name == "exit":
            code = 0
            if len(st) > 1:
                try:
                    code = int(st[1]) & 0xFF
                except ValueError:
                    code = 2
            if math.isinf(elapsed):
                return Behaviour(None, 0, output)
            return Behaviour(elapsed, code, output)
        if name == "sleep" and len(st) == 2 and (secs := _sleep_seconds(st[1])) is not None:
            elapsed += secs
            last_code = 0
        elif name == "echo":
            words = [w for w in st[1:] if w not in ("-n", "-e")]
            output.append(" ".join(words))
            last_code = 0
        elif name in ("true", ":"):
            last_code = 0
        elif name == "false":
            last_code = 1
        else:
            all_known = False
    if all_known and not math.isinf(elapsed):
        return Behaviour(elapsed, last_code, output)
    return Behaviour(None, 0, output)
