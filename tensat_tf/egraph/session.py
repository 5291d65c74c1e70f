"""One egglog e-graph and the few things we ask of it, in the style of egglog-python's `EGraph`.

The rest of the engine speaks to egglog through this class instead of writing program text at each call site, and it
turns egglog 13.2's one exception type (EggSmolError, whose message is all there is to go on) into three outcomes:

  check(fact) -> False      the query is well formed and does not hold ("Check failed" from egglog);
  MalformedProgram           egglog's front end refused the text: a parse error, an unknown function or global, an
                             arity or type error. A test's `assert not check(...)` cannot pass on a typo;
  EgglogError                anything else, e.g. a run that merges two e-classes whose `shape` facts differ ("Panic:
                             Illegal merge attempted for function shape", see egraph/language.py). Rust panics that
                             reach Python as pyo3's PanicException (a BaseException: an unknown ruleset name in
                             13.2) become this too.

In a query, a name that is not a global is a pattern variable, so `(check (= $a $typo))` holds for any $a. Every
global the project binds starts with `$` (egraph/ingest.py, rules/soundness.py), so `check` rejects a `$` name that is
not bound instead of letting it match anything.

push() saves a copy of the e-graph and returns a context manager that restores it on exit (also on an exception)
unless `keep()` was called: the saturation driver (egraph/saturate.py) tries an iteration and keeps it only when it
is within its budgets. egglog 13.2 has no command that drops a saved copy, so a kept frame's copy stays on egglog's
stack (as it did when the driver wrote "(push)" itself).
"""
from __future__ import annotations

import dataclasses
import re

from egglog import bindings

# egglog 13.2's front-end errors (found by experiment; tests/test_session.py pins each): the text, not the e-graph,
# is at fault
_MALFORMED = re.compile(r"parse error|Unbound function|Unbound symbol|Arity mismatch|Expect expression .* to have type")
_CHECK_FAILED = re.compile(r"^Check failed:", re.M)


def parse(egraph: bindings.EGraph, text: str) -> list:
    """egglog's parse of `text`, one top-level form at a time. egglog 13.2's parser is quadratic in the text it is
    given: the language declaration (257 forms, 63 kB) took 1.6 s and 1.3 GB in one call, 0.12 s and 13 MB form by
    form (and on this VM, whose fresh pages come slowly, the one call ran for up to 16 s)."""
    return [cmd for form in forms(text) for cmd in egraph.parse_program(form)]


def forms(text: str) -> list[str]:
    """The top-level s-expressions (and bare atoms) of egglog program text, comments dropped."""
    out, depth, start, i, n = [], 0, None, 0, len(text)
    while i < n:
        ch = text[i]
        if ch == ";":                                   # a comment, to the end of the line
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        if ch == '"':                                   # a string literal: parentheses inside do not count
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            if start is None:
                start = i
            i = j + 1
            if depth == 0:
                out.append(text[start:i])
                start = None
            continue
        if ch == "(":
            if depth == 0:
                start = i
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth == 0:
                out.append(text[start:i + 1])
                start = None
        elif depth == 0 and not ch.isspace():           # a bare atom at top level (egglog will refuse it)
            j = i
            while j < n and not text[j].isspace() and text[j] not in "();":
                j += 1
            out.append(text[i:j])
            i = j
            continue
        i += 1
    if depth != 0 and start is not None:
        out.append(text[start:])                        # unbalanced: egglog reports the parse error
    return out


class EgglogError(RuntimeError):
    """egglog raised while running a program; the message is egglog's, on one line (`raw`: as egglog wrote it)."""

    def __init__(self, message: str, raw: str = ""):
        super().__init__(message)
        self.raw = raw or message


class MalformedProgram(EgglogError):
    """egglog refused the program text itself (parse, name, arity or type error): nothing was asked of the e-graph."""


def one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _guarded(fn, *args):
    """fn(*args), egglog's exceptions turned into ours."""
    try:
        return fn(*args)
    except BaseException as e:
        # pyo3_runtime.PanicException is not importable by name; it is the only BaseException egglog raises
        if not isinstance(e, Exception) and type(e).__name__ != "PanicException":
            raise
        msg = one_line(e)
        raise (MalformedProgram if _MALFORMED.search(msg) else EgglogError)(msg, str(e)) from None


@dataclasses.dataclass
class RunReport:
    updated: bool                        # the run added e-nodes or merged e-classes
    matches: dict                        # rule name -> matches, summed over the run's iterations


class Frame:
    """What `Session.push()` returns: pops on exit unless kept (never kept when the block raised)."""

    def __init__(self, session: "Session"):
        self.session, self.kept = session, False

    def keep(self) -> None:
        self.kept = True

    def __enter__(self) -> "Frame":
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is not None:
            self.kept = False
        if not self.kept:
            self.session.pop()
        return False


class Session:
    """An egglog e-graph (`bindings.EGraph`, the object egraph/ingest.py loads and egraph/export.py freezes)."""

    def __init__(self, egraph: bindings.EGraph | None = None):
        self.egraph = bindings.EGraph() if egraph is None else egraph
        self.depth = 0                   # pushes not popped (kept frames included)

    # ------------------------------------------------------------------ programs
    def run_program(self, text: str) -> list:
        """Parse and run egglog program text; returns egglog's outputs. Raises MalformedProgram / EgglogError."""
        return _guarded(self.egraph.run_program, *_guarded(parse, self.egraph, text))

    # ------------------------------------------------------------------ push / pop
    def push(self) -> Frame:
        """Save the e-graph now; use as `with session.push() as frame:` (restored on exit unless frame.keep())."""
        self.run_program("(push)")
        self.depth += 1
        return Frame(self)

    def pop(self) -> None:
        if self.depth <= 0:
            raise EgglogError("pop without a matching push")
        self.run_program("(pop)")
        self.depth -= 1

    # ------------------------------------------------------------------ rules and runs
    def combine(self, name: str, rulesets: list[str]) -> str:
        """Declare `name` as the union of `rulesets` (one run searches all, then applies all, as egg does)."""
        self.run_program(f"(unstable-combined-ruleset {name} {' '.join(rulesets)})")
        return name

    def run(self, ruleset: str, iterations: int = 1) -> RunReport:
        """`iterations` iterations of `ruleset`."""
        schedule = f"(run {ruleset})" if iterations == 1 else f"(repeat {int(iterations)} (run {ruleset}))"
        return self.schedule(schedule)

    def saturate(self, ruleset: str) -> RunReport:
        """Run `ruleset` until it changes nothing."""
        return self.schedule(f"(saturate (run {ruleset}))")

    def schedule(self, schedule: str) -> RunReport:
        """Run an egglog schedule (`(seq ...)`, `(repeat n ...)`, ...); -> what changed and the matches per rule."""
        report = RunReport(False, {})
        for o in self.run_program(f"(run-schedule {schedule})"):
            if isinstance(o, bindings.RunScheduleOutput):
                report.updated = report.updated or bool(o.report.updated)
                for k, v in o.report.num_matches_per_rule.items():
                    report.matches[k] = report.matches.get(k, 0) + int(v)
        return report

    # ------------------------------------------------------------------ queries
    def sizes(self) -> dict[str, int]:
        """Rows per function: for a constructor, its e-nodes; for a relation or function, its facts."""
        (out,) = self.run_program("(print-size)")
        return dict(out.sizes)

    def check(self, *facts: str) -> bool:
        """Do all `facts` hold? False only when egglog's check fails; MalformedProgram when a fact is not a well-formed
        query over this e-graph (see the module docstring for `$` names); EgglogError if egglog fails otherwise."""
        text = f"(check {' '.join(facts)})"
        commands = _guarded(self.egraph.parse_program, text)
        if len(commands) != 1 or not isinstance(commands[0], bindings.Check):
            raise MalformedProgram(f"not one check: {one_line(text)}")
        self._globals_bound(commands[0].facts)
        try:
            _guarded(self.egraph.run_program, *commands)
        except EgglogError as e:
            if type(e) is EgglogError and _CHECK_FAILED.search(e.raw):
                return False
            raise
        return True

    def _globals_bound(self, facts: list) -> None:
        names: set[str] = set()
        stack = list(facts)
        while stack:
            x = stack.pop()
            if isinstance(x, bindings.Eq):
                stack += [x.left, x.right]
            elif isinstance(x, bindings.Fact):
                stack.append(x.expr)
            elif isinstance(x, bindings.Call):
                stack += list(x.args)
            elif isinstance(x, bindings.Var) and x.name.startswith("$"):
                names.add(x.name)
        for name in sorted(names):
            # an action resolves names as globals only: "Unbound symbol" if it is not one. Unioning a class with itself
            # changes nothing; a global of a primitive sort fails with another message (it is bound).
            try:
                self.run_program(f"(union {name} {name})")
            except EgglogError as e:
                if "Unbound symbol" in str(e):
                    raise MalformedProgram(f"{name} is not a global of this e-graph (a query would match anything)") \
                        from None
