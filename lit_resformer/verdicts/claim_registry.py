"""configs/claims.yaml, read and checked: the registry of claims the scoreboard's unit is (each claim of the paper
with its quote in the paper's words, their location, its basis and reading; the claims beyond it; the preconditions;
the smallest effects of interest declared for classifying inconclusive verdicts). lit_resformer.verdicts.paper_claims
judges them."""

from __future__ import annotations

import math
import re
from pathlib import Path

import yaml

from lit_resformer.provenance import REPO_ROOT as REPO

REGISTRY = REPO / "configs" / "claims.yaml"
# What a claim of the paper stands on (its `basis:`): every basis but "verbatim" needs a `reading:` saying how the
# statement goes beyond its quote and what the text says.
BASES = {"verbatim": "the text says it in words (or a table prints it)",
         "caption": "only a figure's caption says part of it",
         "reading": "a reading of a figure or table beyond the text's words"}
# A quoted span of the paper (“…”) and its location right after it: "(review l. 287–288)", "(review, Table 5)",
# "(v5 caption of its Fig. 4 = review Fig. 5)". Whether the span is verbatim is checked against the paper's text,
# which the project does not ship (../shared/paper/verify_quotes.py, while writing the quote).
QUOTED_SPAN = re.compile(r"“[^“”]+”")
LOCATED_SPAN = re.compile(r"“[^“”]+”\s*\((?:review|v5)\b[^()]*\)")


def quote_problem(quote: object) -> str:
    """Why `quote` is not the paper's words with their location ("" when it is): at least one “…” span, each
    followed by where it is in the review text or the later version's captions."""
    if not isinstance(quote, str) or not QUOTED_SPAN.search(quote):
        return "needs the paper's words in “…”, each followed by its location, e.g. “…” (review l. 287–288)"
    unlocated = len(QUOTED_SPAN.findall(quote)) - len(LOCATED_SPAN.findall(quote))
    if unlocated:
        return (f"{unlocated} quoted span(s) without a location right after them: (review l. N–M), (review, Table N) "
                "or (v5 caption of its Fig. N = review Fig. M)")
    return ""


def load_registry(path: Path = REGISTRY) -> dict:
    """{"claims": [...], "preconditions": {...}} of configs/claims.yaml, checked: unique ids, known fields, and for a
    claim of the paper its quote (the paper's words with their location), its basis and, beyond verbatim, its
    reading."""
    raw = yaml.safe_load(path.read_text()) or {}
    claims = raw.get("claims") or []
    ids = [c["id"] for c in claims]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{path}: duplicate claim ids {sorted({i for i in ids if ids.count(i) > 1})}")
    allowed = {"id", "statement", "where", "condition", "comparisons", "context", "not_tested", "reading",
               "beyond_paper", "preconditions", "quote", "basis", "smallest_effect"}
    preconditions = raw.get("preconditions") or {}
    for c in claims:
        unknown = set(c) - allowed
        if unknown or not c.get("statement") or not c.get("where"):
            raise ValueError(f"{path}: claim {c.get('id')!r}: needs statement and where; unknown fields {sorted(unknown)}")
        if c.get("beyond_paper"):
            if "basis" in c:
                raise ValueError(f"{path}: claim {c['id']!r}: basis is for claims of the paper; a claim beyond it "
                                 "quotes its own source")
        else:
            if problem := quote_problem(c.get("quote")):
                raise ValueError(f"{path}: claim {c['id']!r}: quote {problem}")
            if c.get("basis") not in BASES:
                raise ValueError(f"{path}: claim {c['id']!r}: basis must be one of {', '.join(BASES)}, "
                                 f"got {c.get('basis')!r}")
            if c["basis"] != "verbatim" and not c.get("reading"):
                raise ValueError(f"{path}: claim {c['id']!r}: basis {c['basis']} needs a reading: how the statement "
                                 "goes beyond its quote, and what the text says")
        if "smallest_effect" in c and (problem := _smallest_effect_problem(c["smallest_effect"], {"metric", "value",
                                                                                                 "basis"})):
            raise ValueError(f"{path}: claim {c['id']!r}: smallest_effect {problem}")
        for pid in c.get("preconditions") or []:
            if pid not in preconditions:
                raise ValueError(f"{path}: claim {c['id']!r} names unknown precondition {pid!r}")
    for pid, pre in preconditions.items():
        if not pre.get("cites") or not pre.get("needle"):
            raise ValueError(f"{path}: precondition {pid!r} needs `cites` (its sentence) and `needle`")
    smallest = raw.get("smallest_effect")
    if smallest is not None and (problem := _smallest_effect_problem(smallest, {"nats", "basis"})):
        raise ValueError(f"{path}: smallest_effect {problem}")
    return {"claims": claims, "preconditions": preconditions, "smallest_effect": smallest}


def _smallest_effect_problem(declared: object, fields: set[str]) -> str:
    """Why a declared smallest effect is malformed ("" when it is not): exactly `fields`, its size (`nats`, or
    `value` in the unit of its `metric`) a positive finite number, and every other field a non-empty text."""
    size = "nats" if "nats" in fields else "value"
    words = {"nats": "a positive number", "value": "a positive number in the metric's unit",
             "metric": "the metric it is in", "basis": "why that size, and when it was declared"}
    if not (isinstance(declared, dict) and set(declared) == fields and isinstance(declared[size], (int, float))
            and not isinstance(declared[size], bool) and math.isfinite(declared[size]) and declared[size] > 0
            and all(isinstance(declared[f], str) and declared[f] for f in fields - {size})):
        order = [f for f in words if f in fields]  # the size first, its basis last
        return "must be {" + ", ".join(f"{f}: <{words[f]}>" for f in order) + f"}}, got {declared!r}"
    return ""
