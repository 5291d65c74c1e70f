"""`tensat_tf rules`: one line per rule (name, family, single or multi and whether eager, guards), then the excluded
ones."""
from __future__ import annotations

from tensat_tf.cli import engine_flags


def main(args: list[str]) -> int:
    from tensat_tf import errors
    from tensat_tf.rules.syntax import to_text
    if args:
        raise errors.BadInput("rules takes no arguments (select with --rules/--disable_rules/--rules_file)")
    engine_flags.engine_options()                       # validates the selection flags
    from tensat_tf import rules as rules_mod
    rs = rules_mod.select(engine_flags.FLAGS.rules, engine_flags.FLAGS.disable_rules, engine_flags.FLAGS.rules_file)
    for r in rs.rules:
        guards = " ".join(to_text(g) for g in r.guards) or "-"
        print(f"{r.name:<24} {r.family:<8} {r.kind + (' eager' if r.eager else ''):<12} {guards}")
    for e in rs.excluded:
        print(f"{e.name:<24} {e.family:<8} excluded  {e.reason}")
    fams = sorted({r.family for r in rs.rules})
    print(f"{len(rs.rules)} rules ({', '.join(f'{f} {sum(r.family == f for r in rs.rules)}' for f in fams)}), "
          f"{len(rs.excluded)} excluded")
    for fam in rules_mod.OPTIONAL_FAMILIES:
        if fam not in fams:         # shipped but run only when named: say so, or no one finds them
            names = [r.name for r in rules_mod.builtin().rules if r.family == fam]
            print(f"not run unless named: family {fam} ({', '.join(names)}; --rules=...,{fam})")
    return 0
