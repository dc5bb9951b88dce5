"""Do the verdicts transfer? Each paper claim's comparisons set side by side by regime: the evidence tier's (2.25M
parameters, 2M tokens, AdamW, the embedded corpus) and the transfer tiers' (configs/grids/transfer/: the pinned
corpus, Muon beside AdamW, ten times the tokens, a larger model), with the verdict and effect in each.

A regime is read from the runs compared, not from a grid's name: the optimizer (a matrix point's `optimizer=`, else
the grid's runs' configs), the corpus, the training tokens and the parameters. A claim whose decisive verdicts differ
between regimes is marked as a flip, and each transfer comparison says how far its effect moved from the counted
comparison of the same claim and metric (`change`: the difference with Welch's interval, measures.stats.change_between;
"shrinks" or "grows" when the interval leaves out zero). Transfer rows never decide a paper claim's verdict (the paper's condition is
AdamW at 82M-468M parameters and 20B tokens; verdicts.paper_claims shows them beneath it as "transfer regime"): the
table is where they are read."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from lit_resformer.measures.stats import SeedTest, change_between
from lit_resformer.verdicts.paper_claims import PaperClaim, derive
from lit_resformer.verdicts.rendering import verdict_text
from lit_resformer.verdicts.verdict import Verdict

DECISIVE = ("reproduced", "contradicted")
POINT_OPTIMIZER = re.compile(r"\boptimizer=(\w+)")


def regime_label(v: Verdict) -> str:
    """`AdamW, 2.0M tokens, tiny, embedded`: the optimizer (a matrix point's, else the runs'), the training tokens
    of the runs (their range where they differ: a budget ladder's rungs, a figure's training lengths), the model
    presets and the corpus. Coarse on purpose: the cells of one figure differ in parameters, and their comparisons
    belong to one regime."""
    regime = v.regime or {}
    point = POINT_OPTIMIZER.search(" ".join(v.texts or (v.claim.claim,)))
    optimizers = [point.group(1)] if point else regime.get("optimizer") or ["adamw"]
    names = {"adamw": "AdamW", "muon": "Muon"}
    parts = ["+".join(names.get(o, o) for o in optimizers)]
    if regime.get("tokens"):
        low, high = (f"{t / 1e6:.1f}M" for t in (min(regime["tokens"]), max(regime["tokens"])))
        parts.append(f"{high} tokens" if low == high else f"{low}-{high} tokens")
    for key in ("size", "corpus"):
        if regime.get(key):
            parts.append("+".join(regime[key]))
    return ", ".join(parts)


def regime_verdict(verdicts: Sequence[Verdict]) -> str:
    """The claim's verdict within one regime, by the scoreboard's own rule (verdicts.paper_claims.derive)."""
    return derive([v.verdict for v in verdicts])


@dataclass(frozen=True)
class Change:
    """How far a transfer comparison's effect moved from the counted one of the same claim and metric."""
    reference: Verdict  # the counted comparison (the evidence tier's, the regime a verdict is counted in)
    test: SeedTest  # after - before, Welch's interval; low is None where either side has no t interval

    @property
    def direction(self) -> str:
        """"shrinks" (toward zero or past it) or "grows" when the interval leaves out zero, else "no change shown"."""
        if self.test.low is None or self.test.low <= 0 <= self.test.high or not self.reference.delta:
            return "no change shown"
        return "grows" if (self.test.estimate > 0) == (self.reference.delta > 0) else "shrinks"

    def text(self) -> str:
        if self.test.low is None:
            return f"change {self.test.estimate:+.3f}"
        return f"{self.direction} {self.test.estimate:+.3f} [{self.test.low:+.3f}, {self.test.high:+.3f}]"

    def to_dict(self) -> dict:
        return {"reference_grid": self.reference.grid, "change": self.test.estimate, "ci_low": self.test.low,
                "ci_high": self.test.high, "df": self.test.df, "p_two_sided": self.test.p,
                "direction": self.direction}


def as_seed_test(v: Verdict) -> SeedTest:
    """A verdict's two-sided interval as the seed test it came from (no df: not a t interval, e.g. a saving's)."""
    return SeedTest(v.design or "unpaired", v.n, v.delta, v.low, v.high, v.p_two_sided, v.df, "two-sided", 0.95)


def change_from(v: Verdict, counted: Sequence[Verdict]) -> Change | None:
    """The change of a transfer comparison against the one counted comparison of its claim with the same metric and
    direction; None where there is none or several (a claim measured at several lengths has no single reference)."""
    same = [c for c in counted if (c.claim.metric, c.claim.direction) == (v.claim.metric, v.claim.direction)
            and c.delta is not None]
    if len(same) != 1 or v.delta is None:
        return None
    return Change(same[0], change_between(as_seed_test(v), as_seed_test(same[0])))


@dataclass
class TransferRow:
    claim: PaperClaim
    by_regime: dict[str, list[Verdict]] = field(default_factory=dict)  # regime label -> its comparisons
    counted: list[Verdict] = field(default_factory=list)  # the comparisons that decide the claim's verdict

    @property
    def comparisons(self) -> list[Verdict]:
        return [v for rows in self.by_regime.values() for v in rows]

    @property
    def grids(self) -> list[str]:
        """Every grid its comparisons were seen in, once each."""
        return list(dict.fromkeys(grid for v in self.comparisons for grid in v.grids or (v.grid,)))

    def change(self, v: Verdict) -> Change | None:
        """How far a transfer comparison moved from the counted one (None for a counted comparison itself)."""
        return None if any(v is c for c in self.counted) else change_from(v, self.counted)

    @property
    def flips(self) -> bool:
        """Reproduced in one regime and contradicted in another (each regime's verdict derived from its rows)."""
        return set(DECISIVE) <= {regime_verdict(rows) for rows in self.by_regime.values()}

    def to_dict(self) -> dict:
        def entry(v: Verdict) -> dict:
            change = self.change(v)
            return {**v.to_dict(), **({"change": change.to_dict()} if change else {})}

        return {"claim": self.claim.id, "statement": self.claim.statement, "verdict": self.claim.verdict,
                "flips": self.flips,
                "regimes": {label: [entry(v) for v in rows] for label, rows in self.by_regime.items()}}


def transfer_row(claim: PaperClaim) -> TransferRow:
    """The claim's counted and transfer comparisons by regime (superseded and context rows are left out: their
    question is answered in another row)."""
    row = TransferRow(claim)
    for e in claim.evidence:
        if e.counted or e.status.startswith("transfer"):
            row.by_regime.setdefault(regime_label(e.row), []).append(e.row)
            if e.counted:
                row.counted.append(e.row)
    return row


def transfer_rows(claims: Sequence[PaperClaim]) -> tuple[list[str], list[TransferRow]]:
    """(regime labels in the order first met, one row per claim measured in a transfer regime or decided anywhere)."""
    labels: list[str] = []
    rows = []
    for c in claims:
        row = transfer_row(c)
        labels += [label for label in row.by_regime if label not in labels]
        in_transfer = any(e.status.startswith("transfer") for e in c.evidence)
        decided = any(v.verdict in DECISIVE for vs in row.by_regime.values() for v in vs)
        if row.by_regime and (in_transfer or decided):
            rows.append(row)
    return labels, rows


def _cell(row: TransferRow, verdicts: Sequence[Verdict]) -> str:
    """The claim's comparisons in one regime, as markdown: each one's verdict, Δ and interval, and (a transfer
    comparison's) how far its effect moved from the counted one."""
    if not verdicts:
        return "–"
    parts = []
    for v in verdicts:
        effect = "" if v.delta is None else f" {v.delta:+.3f}"
        interval = "" if v.low is None else f" [{v.low:+.3f}, {v.high:+.3f}]"
        change = row.change(v)
        parts.append(f"{verdict_text(v)}{effect}{interval}" + (f"; {change.text()}" if change else ""))
    return "<br>".join(parts)


def claim_markdown(row: TransferRow) -> str:
    """One claim's row of the transfer table turned on its side: a line per comparison (regime, grids, its cell)."""
    return "| regime | grid | verdict, Δ (a − b) [95% CI]; against the counted |\n|---|---|---|\n" + "".join(
        f"| {regime_label(v)} | {', '.join(v.grids or (v.grid,))} | {_cell(row, [v])} |\n" for v in row.comparisons)


def markdown(claims: Sequence[PaperClaim]) -> str:
    """The transfer table: one row per claim, one column per regime (verdict, Δ a − b and its 95% interval)."""
    labels, rows = transfer_rows(claims)
    if not rows:
        return ""
    lines = ["| claim | paper | " + " | ".join(labels) + " |", "|---|---|" + "---|" * len(labels)]
    for row in rows:
        paper = next((v.claim.paper for vs in row.by_regime.values() for v in vs if v.claim.paper), "") or "–"
        cells = [_cell(row, row.by_regime.get(label, [])) for label in labels]
        name = f"{row.claim.id}{' **(flips)**' if row.flips else ''}"
        lines.append(f"| {name} | {paper.replace('|', '/')} | " + " | ".join(cells) + " |")
    flips = [row.claim.id for row in rows if row.flips]
    lines += ["", f"Verdicts that flip between regimes: {', '.join(flips) if flips else 'none'}.", "",
              "Each transfer cell after `;`: how far its effect moved from the counted comparison (Δ transfer − Δ "
              "counted, Welch's 95% interval over the two sets of runs): **shrinks** or **grows** when the interval "
              "leaves out zero, \"no change shown\" when not; a bare `change` where either has no t interval (a data "
              "saving's is on the log scale)."]
    return "\n".join(lines) + "\n"
