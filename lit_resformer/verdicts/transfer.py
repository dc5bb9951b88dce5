"""Do the verdicts transfer? Each paper claim's comparisons set side by side by regime: the evidence tier's (2.25M
parameters, 2M tokens, AdamW, the embedded corpus) and the transfer tiers' (configs/grids/transfer/: the pinned
corpus, Muon beside AdamW, ten times the tokens, a larger model), with the verdict and effect in each.

A regime is read from the runs compared, not from a grid's name: the optimizer (a matrix point's `optimizer=`, else
the grid's runs' configs), the corpus, the training tokens and the parameters. A claim whose decisive verdicts differ
between regimes is marked as a flip. Transfer rows never decide a paper claim's verdict (the paper's condition is
AdamW at 82M-468M parameters and 20B tokens; verdicts.paper_claims shows them beneath it as "transfer regime"): the
table is where they are read."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from lit_resformer.verdicts.claims import Verdict, verdict_text
from lit_resformer.verdicts.paper_claims import PaperClaim, derive

DECISIVE = ("reproduced", "contradicted")
POINT_OPTIMIZER = re.compile(r"\boptimizer=(\w+)")


def regime_label(v: Verdict) -> str:
    """`AdamW, 2.0M tokens, tiny, embedded`: the optimizer (a matrix point's, else the runs'), the most training
    tokens of a run, the model presets and the corpus. Coarse on purpose: the cells of one figure differ in
    parameters, and their comparisons belong to one regime."""
    regime = v.regime or {}
    point = POINT_OPTIMIZER.search(" ".join(v.texts or (v.claim.claim,)))
    optimizers = [point.group(1)] if point else regime.get("optimizer") or ["adamw"]
    names = {"adamw": "AdamW", "muon": "Muon"}
    parts = ["+".join(names.get(o, o) for o in optimizers)]
    if regime.get("tokens"):
        parts.append(f"{max(regime['tokens']) / 1e6:.1f}M tokens")
    for key in ("size", "corpus"):
        if regime.get(key):
            parts.append("+".join(regime[key]))
    return ", ".join(parts)


def regime_verdict(verdicts: Sequence[Verdict]) -> str:
    """The claim's verdict within one regime, by the scoreboard's own rule (verdicts.paper_claims.derive)."""
    return derive([v.verdict for v in verdicts])


@dataclass
class TransferRow:
    claim: PaperClaim
    by_regime: dict[str, list[Verdict]] = field(default_factory=dict)  # regime label -> its comparisons

    @property
    def flips(self) -> bool:
        """Reproduced in one regime and contradicted in another (each regime's verdict derived from its rows)."""
        return set(DECISIVE) <= {regime_verdict(rows) for rows in self.by_regime.values()}

    def to_dict(self) -> dict:
        return {"claim": self.claim.id, "statement": self.claim.statement, "verdict": self.claim.verdict,
                "flips": self.flips,
                "regimes": {label: [v.to_dict() for v in rows] for label, rows in self.by_regime.items()}}


def transfer_rows(claims: Sequence[PaperClaim]) -> tuple[list[str], list[TransferRow]]:
    """(regime labels in the order first met, one row per claim measured in a transfer regime or decided anywhere)."""
    labels: list[str] = []
    rows = []
    for c in claims:
        row = TransferRow(c)
        for e in c.evidence:
            if not (e.counted or e.status.startswith("transfer")):
                continue  # superseded or context rows: their question is answered in another row
            label = regime_label(e.row)
            row.by_regime.setdefault(label, []).append(e.row)
            if label not in labels:
                labels.append(label)
        in_transfer = any(e.status.startswith("transfer") for e in c.evidence)
        decided = any(v.verdict in DECISIVE for vs in row.by_regime.values() for v in vs)
        if row.by_regime and (in_transfer or decided):
            rows.append(row)
    return labels, rows


def _cell(verdicts: Sequence[Verdict]) -> str:
    if not verdicts:
        return "–"
    parts = []
    for v in verdicts:
        effect = "" if v.delta is None else f" {v.delta:+.3f}"
        interval = "" if v.low is None else f" [{v.low:+.3f}, {v.high:+.3f}]"
        parts.append(f"{verdict_text(v)}{effect}{interval}")
    return "<br>".join(parts)


def markdown(claims: Sequence[PaperClaim]) -> str:
    """The transfer table: one row per claim, one column per regime (verdict, Δ a − b and its 95% interval)."""
    labels, rows = transfer_rows(claims)
    if not rows:
        return ""
    lines = ["| claim | paper | " + " | ".join(labels) + " |", "|---|---|" + "---|" * len(labels)]
    for row in rows:
        paper = next((v.claim.paper for vs in row.by_regime.values() for v in vs if v.claim.paper), "") or "–"
        cells = [_cell(row.by_regime.get(label, [])) for label in labels]
        name = f"{row.claim.id}{' **(flips)**' if row.flips else ''}"
        lines.append(f"| {name} | {paper.replace('|', '/')} | " + " | ".join(cells) + " |")
    flips = [row.claim.id for row in rows if row.flips]
    lines += ["", f"Verdicts that flip between regimes: {', '.join(flips) if flips else 'none'}."]
    return "\n".join(lines) + "\n"
