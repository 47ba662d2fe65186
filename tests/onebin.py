"""One bin's rule result as the classifier settles it, for tests that probe the rules bin by bin."""

from __future__ import annotations

from memtop.analysis.phases import EXIT, RULE_LABEL, RULE_TEXT, STICKY, Features, One, first_rule, rule_sub


def evaluate(f: Features, current: str = "") -> tuple[str, str, str]:
    """(label, rule text, sub-tag) for one bin's features, given the current stable label."""
    v = One(f)
    rid = first_rule(v)
    if current in STICKY and RULE_LABEL[rid] in STICKY[current][0] and STICKY[current][2](v):
        rid = EXIT[current]
    return RULE_LABEL[rid], RULE_TEXT[rid], str(rule_sub(rid, v))
