"""Rewrite rules as data: the rule files of this folder (one per family) and their loader.

    from tensat_tf import rules
    rs = rules.select(enable=["tensat", "tf-fold"], disable=["S024"], extra_files=["my.rules"])
    rs.rules, rs.excluded, rs.names

`enable`/`disable` take rule names or family names. Rule files are read in sorted file order, so the rule order (and
with it every later tie-break) is deterministic.
"""
from __future__ import annotations

import dataclasses
import functools
import os
from typing import Iterable, Optional

from tensat_tf.rules.compile import compile_rule, counting_name, ruleset_name
from tensat_tf.rules.syntax import Excluded, Rule, RuleSyntaxError, parse_file

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_FAMILIES = ("tensat", "tf-fold", "merge", "einsum")
# families shipped here but run only when named (tensat_assoc.rules, tensat_distrib.rules and pixel_matmul.rules say
# why)
OPTIONAL_FAMILIES = ("tensat-assoc", "tensat-distrib", "pixel-matmul")


class UnknownRule(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class RuleSet:
    rules: tuple[Rule, ...]
    excluded: tuple[Excluded, ...] = ()

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.rules]

    def by_name(self, name: str) -> Rule:
        for r in self.rules:
            if r.name == name:
                return r
        raise KeyError(name)


def read_file(path: str) -> tuple[str, list[Rule], list[Excluded]]:
    with open(path, encoding="utf-8") as f:
        return parse_file(f.read(), os.path.basename(path))


@functools.lru_cache(maxsize=None)
def builtin() -> RuleSet:
    """Every rule shipped in this folder."""
    rules, excluded = [], []
    for fname in sorted(os.listdir(HERE)):
        if fname.endswith(".rules"):
            _, r, e = read_file(os.path.join(HERE, fname))
            rules += r
            excluded += e
    _check_unique(rules)
    return RuleSet(tuple(rules), tuple(excluded))


def _check_unique(rules: Iterable[Rule]) -> None:
    seen: dict[str, str] = {}
    for r in rules:
        if r.name in seen:
            raise RuleSyntaxError(f"rule {r.name} defined twice ({seen[r.name]}, {r.origin})")
        seen[r.name] = r.origin
        compile_rule(r)                      # every rule must compile (sorts, arities, bound variables)


def select(enable: Optional[Iterable[str]] = None, disable: Iterable[str] = (),
           extra_files: Iterable[str] = ()) -> RuleSet:
    """Rules whose name or family is in `enable` (default: DEFAULT_FAMILIES) and in neither `disable`.

    Rules from extra_files are always enabled unless disabled. Unknown names raise UnknownRule.
    """
    base = builtin()
    extra_rules: list[Rule] = []
    for path in extra_files:
        _, r, _ = read_file(path)
        extra_rules += r
    everything = list(base.rules) + extra_rules
    _check_unique(everything)
    known = {r.name for r in everything} | {r.family for r in everything} | {e.name for e in base.excluded}
    enable = list(DEFAULT_FAMILIES if enable is None else enable)
    disable = list(disable)
    for n in enable + disable:
        if n not in known and n not in DEFAULT_FAMILIES:
            raise UnknownRule(f"unknown rule or family {n!r}")
    excluded_names = {e.name for e in base.excluded}
    bad = [n for n in enable if n in excluded_names]
    if bad:
        raise UnknownRule(f"rule {bad[0]!r} is excluded: {[e.reason for e in base.excluded if e.name == bad[0]][0]}")
    on = set(enable)
    off = set(disable)
    chosen = [r for r in base.rules if (r.name in on or r.family in on) and r.name not in off and r.family not in off]
    chosen += [r for r in extra_rules if r.name not in off and r.family not in off]
    return RuleSet(tuple(chosen), base.excluded)


__all__ = ["compile_rule", "counting_name", "Rule", "RuleSet", "Excluded", "RuleSyntaxError", "UnknownRule", "builtin",
           "select", "read_file", "ruleset_name", "DEFAULT_FAMILIES", "OPTIONAL_FAMILIES"]
