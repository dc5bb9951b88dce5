"""The paper's claims as the unit of the scoreboard: each claim of configs/claims.yaml (the paper's words, where it
is made, its condition) with the comparisons that are its evidence (the rows of
lit_resformer.verdicts.scoreboard_rows.scoreboard), and its verdict derived from them by one rule (the registry
file's header):

- a comparison whose question (cells, metric, measurement point, margin) is tested (any verdict but "not tested") in a
  higher tier (gpu > evidence > any other grid) is "superseded by <grid>": shown, not counted;
- a comparison of a transfer grid (configs/grids/transfer/: another optimizer, budget, size or corpus than the paper's
  condition) is shown, not counted, and read in the transfer table (lit_resformer.board.transfer);
- a comparison whose deciding fields changed after its grid's first data is exploratory (DECLARATIONS, written by
  lit_resformer.board.declared): shown, marked, not counted; where it changed only its margin or direction and its
  interval holds the bound of the form it had before the data, it counts as that form's verdict, inconclusive (it is
  judged under its earlier declaration; an interval clear of that bound would need the earlier form judged anew, and
  that row stays uncounted);
- of the counted comparisons: all reproduced -> reproduced; some contradicted and none reproduced -> contradicted;
  both -> mixed; all not tested -> not tested; otherwise inconclusive;
- a claim no comparison measures is "not tested", with what would test it (`not_tested:`).

Per-domain sub-rows stay beneath the comparison they split and are not counted. Comparisons no claim lists are
collected under "unassigned" (none in the committed results: tests/verdicts/test_paper_claims.py)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from lit_resformer.measures.power import in_nats, power_of
from lit_resformer.measures.stats import ALPHA, benjamini_yekutieli
from lit_resformer.provenance import REPO_ROOT as REPO
from lit_resformer.verdicts.claim_registry import BASES, load_registry
from lit_resformer.verdicts.regime import regime_text
from lit_resformer.verdicts.rendering import ADJUSTMENT_NOTE, verdict_text
from lit_resformer.verdicts.verdict import Verdict, is_sub_row

# when each comparison of docs/results was declared, from git history (`lit-resformer claims docs/results
# --preconditions --json --out docs/declarations.json`; lit_resformer.board.declared writes it, a test checks it)
DECLARATIONS = REPO / "docs" / "declarations.json"
# the fields an exploratory comparison may have changed and still be judged under its earlier form by its interval
BOUND_FIELDS = {"margin", "direction", "paper_claim"}
CLAIM_VERDICTS = ("reproduced", "contradicted", "mixed", "inconclusive", "not tested")
TIER_RANK = {"gpu": 3, "evidence": 2}  # any other grid (repro, demo, standalone sweeps): 1


def base_text(text: str) -> str:
    """A comparison's words without its matrix point (" [d_model=32]")."""
    return re.sub(r" \[[^\]]*\]$", "", text)


def grid_tier(grid: str) -> str:
    if grid.startswith("transfer-"):  # configs/grids/transfer/: the same questions in another regime
        return "transfer"
    for tier in ("gpu", "evidence", "repro"):
        if grid.endswith(f"-{tier}"):
            return tier
    return "standalone"


def _rank(grid: str) -> int:
    return TIER_RANK.get(grid_tier(grid), 1)


def question(v: Verdict) -> tuple:
    c = v.claim
    return (c.a, c.b, c.metric, c.at, c.over, c.margin, c.target)


def _same_question(w: Verdict, v: Verdict) -> bool:
    """The same question: the same cells, metric, point and margin, or the same words (a comparison merged across
    grids speaks in one grid's words and cell names: fig10's "attention" is fig7's "resformer")."""
    if question(w) == question(v):
        return True
    words = {base_text(t) for t in (w.texts or (w.claim.claim,))} & {base_text(t) for t in (v.texts or (v.claim.claim,))}
    return bool(words) and question(w)[2:] == question(v)[2:]


@dataclass
class Evidence:
    row: Verdict
    counted: bool
    status: str = ""  # "superseded by <grid>", "context (not counted)", "see <claim id>", ""
    sub_rows: list[Verdict] = field(default_factory=list)
    # the Benjamini-Yekutieli q of a counted comparison over every counted comparison of the board (board_q)
    q_by: float | None = None

    def to_dict(self) -> dict:
        return {**self.row.to_dict(), "tier": grid_tier(self.row.grid), "counted": self.counted,
                "status": self.status, "q_by": self.q_by, "sub_rows": [s.to_dict() for s in self.sub_rows]}


@dataclass
class PaperClaim:
    id: str
    statement: str
    where: str
    condition: str
    verdict: str
    reason: str
    evidence: list[Evidence]
    beyond_paper: bool = False
    reading: str = ""
    preconditions: list[str] = field(default_factory=list)
    quote: str = ""
    basis: str = ""  # a claim of the paper: a key of BASES

    @property
    def tiers(self) -> list[str]:
        return sorted({grid_tier(e.row.grid) for e in self.evidence if e.counted})

    @property
    def regimes(self) -> list[str]:
        return list(dict.fromkeys(f"{e.row.grid}: {regime_text(e.row.regime)}" for e in self.evidence
                                  if e.counted and e.row.regime))

    def to_dict(self) -> dict:
        return {"id": self.id, "statement": self.statement, "where": self.where, "condition": self.condition,
                "verdict": self.verdict, "reason": self.reason, "beyond_paper": self.beyond_paper,
                "quote": self.quote, "basis": self.basis, "reading": self.reading, "preconditions": self.preconditions,
                "tiers": self.tiers, "regimes": self.regimes, "comparisons": [e.to_dict() for e in self.evidence]}


def derive(verdicts: Sequence[str]) -> str:
    """A claim's verdict from its counted comparisons' verdicts (the rule in the module docstring)."""
    if not verdicts:
        return "not tested"
    got = set(verdicts)
    if "reproduced" in got and "contradicted" in got:
        return "mixed"
    if got == {"reproduced"}:
        return "reproduced"
    if "contradicted" in got:
        return "contradicted"
    if got == {"not tested"}:
        return "not tested"
    return "inconclusive"


def exploratory_comparisons(record: Path = DECLARATIONS) -> dict[tuple[str, str], dict]:
    """{(grid, comparison words): its row} of the comparisons the committed declarations (`record`) find declared after
    their data: exploratory, or confirmed by another grid since (counted there)."""
    return {(r["grid"], r["claim"]): r for r in json.loads(record.read_text())
            if r["kind"] == "comparison" and r["status"] in ("exploratory", "confirmed")}


def declaration_of(v: Verdict, exploratory: dict[tuple[str, str], dict]) -> dict | None:
    """The declaration record (exploratory_comparisons) of a row's comparison in any grid it was judged in, or None
    for a comparison declared before its data."""
    texts = {base_text(t) for t in (v.texts or (v.claim.claim,))}
    return next((exploratory[(grid, text)] for grid in (v.grids or (v.grid,)) for text in sorted(texts)
                 if (grid, text) in exploratory), None)


def _as_declared_before(v: Verdict, declaration: dict) -> tuple[Verdict | None, str]:
    """An exploratory comparison's row judged under the form it had before its data ((None, why) where that cannot
    be read from its interval), and the words that say so."""
    change = (f"exploratory: its grid's first data {declaration['first_data']['date'][:10]}, its present form "
              f"declared {declaration['declared']['date'][:10] or 'uncommitted'} "
              f"({declaration['declared']['commit'][:7]}; {declaration['change']})")
    if declaration["status"] == "confirmed":
        by = declaration["confirmed_by"]
        return None, (f"{change}; confirmed by {by['grid']} on seeds first run after it ({by['date'][:10]}): "
                      "counted there")
    earlier, now = declaration.get("earlier"), declaration["fields"]
    changed = {k for k in now if earlier is not None and earlier.get(k) != now[k]}
    if earlier is None or not changed <= BOUND_FIELDS or earlier.get("direction") not in ("lower", "higher") \
            or v.low is None or v.high is None:
        return None, f"{change}; not counted until confirmed on seeds first run after it"
    margin = earlier.get("margin") or 0.0
    bound = -margin if earlier["direction"] == "higher" else margin
    if not v.low <= bound <= v.high:
        return None, (f"{change}; its form before the data (bound {bound:+g}) is not judged here: not counted until "
                      "confirmed on seeds first run after it")
    why = (f"{change}; judged as declared before it ({earlier['direction']}, bound {bound:+g}): its interval "
           f"[{v.low:+.4f}, {v.high:+.4f}] holds the bound, inconclusive until confirmed on seeds first run after it")
    # nor is the present form's margin its effect of interest: the claim's declared smallest effect classifies it
    power = {**v.power, "effect": None, "seeds_needed": None, "tost_p": None, "classification": None}
    return replace(v, verdict="inconclusive", unadjusted="inconclusive", p_two_sided=None, p_holm=None, power=power,
                   note="; ".join(filter(None, [why, v.note]))), why


def _classified(v: Verdict, registry_smallest: dict | None, claim_smallest: dict | None) -> Verdict:
    """An inconclusive row whose comparison gives no effect of interest, classified (bounded / underpowered /
    unresolved) against the smallest effect its claim declares in the row's metric, else, for a loss in nats, the
    registry's; saying which. Its verdict is never changed by it."""
    if v.verdict != "inconclusive" or v.power.get("effect") is not None or "level" not in v.power:
        return v
    if claim_smallest and claim_smallest["metric"] == v.claim.metric:
        size, basis = claim_smallest["value"], claim_smallest["basis"]
    elif registry_smallest and in_nats(v.claim.metric):
        size, basis = registry_smallest["nats"], registry_smallest["basis"]
    else:
        return v
    power = power_of(v.design, v.n, v.df, v.low, v.high, v.power["level"], size, v.verdict)
    return replace(v, power={**v.power, **power, "effect_basis": f"declared smallest effect: {basis}"})


def paper_claims(rows: Sequence[Verdict], registry: dict | None = None,
                 exploratory: dict[tuple[str, str], dict] | None = None) -> list[PaperClaim]:
    """The registry's claims, each with the scoreboard rows that are its evidence, in registry order; rows no claim
    lists end under a claim "unassigned: <text>" of their own. `exploratory` (exploratory_comparisons): the
    comparisons declared after their data, by (grid, words); None: the committed record's."""
    registry = registry or load_registry()
    exploratory = exploratory_comparisons() if exploratory is None else exploratory
    top = [v for v in rows if not is_sub_row(v)]
    subs: dict[int, list[Verdict]] = {}
    parent = None
    for v in rows:
        if is_sub_row(v):
            if parent is not None:
                subs.setdefault(id(parent), []).append(v)
        else:
            parent = v
    used: set[int] = set()
    counted_for: dict[int, str] = {}  # a comparison -> the one claim it is counted for (the first in registry order)
    claims = []
    for entry in registry["claims"]:
        wanted = set(entry.get("comparisons") or [])
        context = set(entry.get("context") or [])
        mine = [v for v in top if (v.claim.paper_claim == entry["id"])
                or {base_text(t) for t in (v.texts or (v.claim.claim,))} & (wanted | context)]
        used |= {id(v) for v in mine}
        evidence = []
        for v in mine:
            texts = {base_text(t) for t in (v.texts or (v.claim.claim,))}
            if not texts & wanted and v.claim.paper_claim != entry["id"]:
                evidence.append(Evidence(v, False, "context (not counted)", subs.get(id(v), [])))
                continue
            if grid_tier(v.grid) == "transfer":  # outside the paper's condition: read in the transfer table
                evidence.append(Evidence(v, False, "transfer regime (not counted)", subs.get(id(v), [])))
                continue
            higher = [w for w in mine if w is not v and _same_question(w, v) and _rank(w.grid) > _rank(v.grid)
                      and w.verdict != "not tested"]
            if higher:
                best = max(higher, key=lambda w: _rank(w.grid))
                evidence.append(Evidence(v, False, f"superseded by {best.grid}", subs.get(id(v), [])))
            elif id(v) in counted_for:  # one measurement is evidence for one claim: shown here, counted there
                evidence.append(Evidence(v, False, f"see {counted_for[id(v)]}", subs.get(id(v), [])))
            elif declaration := declaration_of(v, exploratory):
                earlier, why = _as_declared_before(v, declaration)
                if earlier is not None:
                    counted_for[id(v)] = entry["id"]
                evidence.append(Evidence(earlier or v, earlier is not None, why, subs.get(id(v), [])))
            else:
                counted_for[id(v)] = entry["id"]
                evidence.append(Evidence(v, True, "", subs.get(id(v), [])))
        counted = [e.row.verdict for e in evidence if e.counted]
        decided = derive(counted)
        if not counted:
            reason = entry.get("not_tested") or "no committed comparison measures it"
        else:
            tally = ", ".join(f"{counted.count(n)} {n}" for n in ("reproduced", "contradicted", "inconclusive",
                                                                   "not tested") if counted.count(n))
            reason = f"{len(counted)} comparison(s) counted: {tally}" + _decided_by(decided, evidence)
            if decided == "not tested" and entry.get("not_tested"):
                reason += f"; {entry['not_tested']}"
        claims.append(PaperClaim(entry["id"], entry["statement"], entry["where"], entry.get("condition", ""), decided,
                                 reason, evidence, bool(entry.get("beyond_paper")), entry.get("reading", ""),
                                 list(entry.get("preconditions") or []), entry.get("quote", ""),
                                 entry.get("basis", "")))
    declared = {entry["id"]: entry.get("smallest_effect") for entry in registry["claims"]}
    for c in claims:
        c.evidence = [replace(e, row=_classified(e.row, registry.get("smallest_effect"), declared[c.id]))
                      for e in c.evidence]
    for v in top:
        if id(v) not in used:
            claims.append(PaperClaim(f"unassigned: {base_text(v.claim.claim)}", v.claim.claim, "(not in "
                                     "configs/claims.yaml)", "", derive([v.verdict]), "unassigned comparison",
                                     [Evidence(v, True, "", subs.get(id(v), []))], bool(v.claim.beyond_paper)))
    board_q(claims)
    return claims


def _decided_by(decided: str, evidence: Sequence[Evidence]) -> str:
    """Where a claim's verdict differs from some of its counted rows (a decisive row under an inconclusive or mixed
    claim, or the reverse), which rows made it so, so that no row reads as the claim's verdict when it is not."""
    counted = [e.row for e in evidence if e.counted]
    if decided in ("reproduced", "not tested") or len({v.verdict for v in counted}) < 2:
        return ""
    against = {"inconclusive": ("inconclusive", "not tested"), "contradicted": ("inconclusive", "not tested"),
               "mixed": ("reproduced", "contradicted")}[decided]
    named = [f"{v.grid}: '{v.claim.claim}' is {v.verdict}" for v in counted if v.verdict in against]
    return f"; {decided} because {'; '.join(named)}" if named else ""


def board_q(claims: Sequence[PaperClaim]) -> None:
    """Set each counted comparison's Benjamini-Yekutieli q over every counted comparison of the board (both
    sections) that has a test: how many decisive verdicts would stand under one board-wide false-discovery rule.
    Per-grid Holm stays the rule that decides; this is a robustness column."""
    tested = [e for c in claims for e in c.evidence if e.counted and e.row.p_two_sided is not None
              and math.isfinite(e.row.p_two_sided) and e.row.verdict != "not tested"]
    for e, q in zip(tested, benjamini_yekutieli([e.row.p_two_sided for e in tested]), strict=True):
        e.q_by = float(q)


def _groups(keys: Sequence[Sequence[object]]) -> int:
    """How many groups the items are in, items that share any key (keys[i]: the i-th item's) joined."""
    group: dict[int, int] = {}

    def find(i: int) -> int:
        while group.setdefault(i, i) != i:
            i = group[i]
        return i

    owner: dict[object, int] = {}
    for i, item_keys in enumerate(keys):
        find(i)
        for key in item_keys:
            group[find(owner.setdefault(key, i))] = find(i)
    return len({find(i) for i in range(len(keys))})


def independent_measurements(claims: Sequence[PaperClaim]) -> int:
    """How many independent sets of runs stand behind these claims: two claims are one measurement when their
    counted comparisons share the runs of their `a` side (the variant under test: the CLA runs behind two of Fig.
    5's claims, say); a shared baseline does not join them."""
    return _groups([[e.row.runs[7] if e.row.runs is not None else id(e.row)  # _identity: the a side's configs
                     for e in c.evidence if e.counted] for c in claims])


def independent_measurements_of_comparisons(evidence: Sequence[Evidence]) -> int:
    """How many independent measurements these comparisons are: comparisons that share any run (a shared baseline
    included) are one; a comparison without a run identity is its own."""
    return _groups([[] if e.row.runs is None else [run for side in e.row.runs[7:] for run in side] for e in evidence])


def by_robust(claim: PaperClaim) -> str:
    """The claim's verdict with a decisive counted comparison kept decisive only where its board-wide
    Benjamini-Yekutieli q is below ALPHA (else read as inconclusive)."""
    return derive([e.row.verdict if e.row.verdict not in ("reproduced", "contradicted")
                   or (e.q_by is not None and e.q_by < ALPHA) else "inconclusive" for e in claim.evidence if e.counted])


def claim_counts(claims: Sequence[PaperClaim]) -> dict:
    """{"paper": {verdict: n, "total": n, "comparisons": counted, "shown": n, "independent": {verdict: sets of runs},
    "decisive": counted decisive comparisons, "survive_q": of those with q_by < ALPHA}, "beyond": {...}}."""
    out = {}
    for name, group in (("paper", [c for c in claims if not c.beyond_paper]),
                        ("beyond", [c for c in claims if c.beyond_paper])):
        tally = {v: sum(c.verdict == v for c in group) for v in CLAIM_VERDICTS}
        decisive = [e for c in group for e in c.evidence if e.counted and e.row.verdict in ("reproduced", "contradicted")]
        out[name] = {**tally, "total": len(group),
                     "comparisons": sum(e.counted for c in group for e in c.evidence),
                     "shown": sum(len(c.evidence) for c in group),
                     "independent": {v: independent_measurements([c for c in group if c.verdict == v])
                                     for v in ("reproduced", "contradicted")},
                     "decisive": len(decisive),
                     "survive_q": sum(e.q_by is not None and e.q_by < ALPHA for e in decisive),
                     "by_robust": {v: sum(by_robust(c) == v for c in group) for v in CLAIM_VERDICTS},
                     "independent_measurements": independent_measurements_of_comparisons(
                         [e for c in group for e in c.evidence if e.counted])}
    return out


def counts_line(counts: dict, which: str) -> str:
    c = counts[which]
    words = "claims of the paper" if which == "paper" else "claims beyond the paper"
    tally = ", ".join(f"{c[v]} {v}" for v in CLAIM_VERDICTS)
    independent = c["independent"]
    return (f"{c['total']} {words}: {tally} (from {c['comparisons']} counted comparisons of {c['shown']} shown; the "
            f"reproduced rest on {independent['reproduced']} and the contradicted on {independent['contradicted']} "
            f"independent sets of runs; {c['survive_q']} of {c['decisive']} decisive comparisons hold at a board-wide "
            f"Benjamini-Yekutieli q < {ALPHA:g})"
            + (f"; BY-robust tally (a decisive comparison counted only at q < {ALPHA:g}): "
               + ", ".join(f"{c['by_robust'][v]} {v}" for v in CLAIM_VERDICTS)
               + f"; the counted comparisons are {c['independent_measurements']} independent measurements (runs "
               "shared between comparisons counted once)"))


def headline_regime(claims: Sequence[PaperClaim]) -> str:
    """The regime most of the counted evidence comes from: the evidence tier's grids' regimes, in one line."""
    rows = [e.row for c in claims for e in c.evidence if e.counted and e.row.regime]
    evidence = [r for r in rows if grid_tier(r.grid) == "evidence"] or rows
    if not evidence:
        return ""
    params = [x for r in evidence for x in (r.regime.get("params") or [])]
    tokens = [x for r in evidence for x in (r.regime.get("tokens") or [])]
    tpp = [x for r in evidence for x in (r.regime.get("tokens_per_param") or [])]
    if not (params and tokens and tpp):  # runs whose summaries record no size or token count
        return ""
    epochs = max((r.regime.get("epochs") or 0 for r in evidence), default=0)
    optimizers = sorted({o for r in evidence for o in (r.regime.get("optimizer") or ["adamw (not recorded)"])})
    return (f"{min(params) / 1e6:.2f}M-{max(params) / 1e6:.2f}M parameters, {min(tokens) / 1e6:.1f}M-"
            f"{max(tokens) / 1e6:.1f}M training tokens ({min(tpp):.2f}-{max(tpp):.2f} tokens per parameter), "
            + ("within one epoch" if not epochs else f"up to {epochs:.2f} epochs")
            + f", {', '.join(optimizers)} (the paper: 82M-468M parameters, 20B tokens, one epoch, AdamW)")


def markdown(claims: Sequence[PaperClaim], verdict_rows: Sequence[Verdict] = ()) -> str:
    counts = claim_counts(claims)
    lines = ["# Scoreboard", "",
             "Generated by `lit-resformer claims docs/results --markdown --out docs/SCOREBOARD.md`; do not edit by hand.",
             "", f"**{counts_line(counts, 'paper')}; {counts_line(counts, 'beyond')}.**", ""]
    regime = headline_regime(claims)
    if regime:
        lines += [f"Regime of the evidence: {regime}. Every verdict holds in its grid's regime only.", ""]
    lines += ["One rule decides every comparison: its two-sided 95% interval excludes zero (or its margin's bound) on "
              "one side and its two-sided p, Holm-adjusted within its grid's family, is below 0.05 — the same for "
              "reproduced and contradicted, in the grid report and here (a comparison of runs another grid trained is "
              "judged in that grid's family only); (fragile): Holm p in [0.025, 0.05). A claim's "
              "verdict is derived from its comparisons (configs/claims.yaml): superseded rows are shown, not counted, "
              "and a comparison counts for one claim only ('see <claim>' elsewhere). Beside the rule, q (board, BY): "
              "each counted comparison's Benjamini-Yekutieli q over every counted comparison of the board, a "
              "false-discovery rate under any dependence, for robustness only.",
              "", ADJUSTMENT_NOTE, ""]
    for title, group in (("Claims of the paper", [c for c in claims if not c.beyond_paper]),
                         ("Claims beyond the paper", [c for c in claims if c.beyond_paper])):
        lines += [f"## {title}", ""]
        for c in group:
            lines += [f"### {c.id}: **{c.verdict}**", "",
                      f"{c.statement} — *{c.where}*" + (f"; condition: {c.condition}" if c.condition else ""), ""]
            if c.quote:
                lines += [f"> {c.quote}", ""]
            if c.basis:
                lines += [f"Basis: {c.basis} ({BASES[c.basis]}).", ""]
            if c.reading:
                lines += [f"Reading: {c.reading}", ""]
            if c.preconditions:
                lines += [f"Preconditions: {', '.join(c.preconditions)} (configs/claims.yaml)", ""]
            lines += [f"{c.reason}." + (f" Tiers: {', '.join(c.tiers)}." if c.tiers else ""), ""]
            if c.evidence:
                lines += ["| verdict | comparison | Δ (a − b) | 95% CI | p Holm | MDE (80%, α 0.05 / m: Holm's first step) | MDE (80%, α 0.05) | n "
                          "| p (two-sided) | grid (tier) | counted | q (board, BY) |",
                          "|---|---|---|---|---|---|---|---|---|---|---|---|"]
                for e in c.evidence:
                    for v, sub in [(e.row, False), *((s, True) for s in e.sub_rows)]:
                        ci = "–" if v.low is None else f"[{v.low:+.4f}, {v.high:+.4f}]"
                        delta = "–" if v.delta is None else f"{v.delta:+.4f}"
                        p2 = "–" if v.p_two_sided is None else f"{v.p_two_sided:.3g}"
                        ph = "–" if v.p_holm is None else f"{v.p_holm:.3g}"
                        tier = grid_tier(v.grid)
                        status = ("sub-row" if sub else (e.status or "yes"))
                        name = ("↳ " if sub else "") + v.claim.claim.replace("|", "/")
                        note = f" — {v.note}" if v.note and v.verdict == "not tested" else ""
                        q = "–" if sub or e.q_by is None else f"{e.q_by:.3g}"
                        mde, mde_alpha = ("–" if v.power.get(k) is None else f"{v.power[k]:.4f}"
                                          for k in ("mde", "mde_at_alpha"))
                        lines.append(f"| {verdict_text(v)} | {name}{note.replace('|', '/')} | {delta} | {ci} | {ph} | "
                                     f"{mde} | {mde_alpha} | {v.n} | {p2} | {', '.join(v.grids or (v.grid,))} ({tier}) | {status} | {q} |")
                lines.append("")
            for r in c.regimes:
                lines.append(f"- regime {r}")
            if c.regimes:
                lines.append("")
    return "\n".join(lines) + "\n"
