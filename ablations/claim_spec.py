"""The claims a grid file declares: the paper's claims for its figure, checked against the grid's cells when the
grid is loaded (ablations.spec) and judged on its runs by ablations.claims.

    claims:
      - claim: ResFormer ends with a lower validation loss than vanilla     # the paper's claim, in words
        a: resformer            # the cell the claim is about (in a cells x matrix grid, a `cells` entry:
        b: vanilla              # the cell it is compared with    the claim is then judged at every matrix point)
        metric: val_loss        # val_loss | val_loss/<domain> | train_loss | critical_point_growth
        direction: lower        # a's metric is lower (or higher) than b's
      - claim: SVFormer's critical point grows with the training length
        a: svformer             # critical_point_growth: `cells` entries of a cells x matrix grid
        b: vanilla
        metric: critical_point_growth
        over: data.seq_len      # the matrix key along which the critical point grows
        direction: higher
      - claim: SVFormer is overtaken by vanilla by the end of training
        a: svformer
        b: vanilla
        metric: val_loss
        direction: higher
        requires: crossing      # optional: judged only where the grid's baseline (vanilla) has overtaken every
                                # SVFormer run of the comparison in training loss, else "not tested"
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

CRITICAL_POINT_GROWTH = "critical_point_growth"
SUMMARY_METRICS = ("val_loss", "train_loss")  # and val_loss/<domain>: final values in each run's summary.json
DIRECTIONS = ("lower", "higher")
REQUIREMENTS = ("crossing",)  # preconditions a claim may name: `requires: crossing` (see the module docstring)
CLAIM_FIELDS = {"claim", "a", "b", "metric", "direction", "over", "requires"}


@dataclass(frozen=True)
class Claim:
    claim: str
    a: str
    b: str
    metric: str
    direction: str
    over: str | None = None  # critical_point_growth only
    requires: str | None = None  # a precondition of the comparison (REQUIREMENTS), checked on the runs

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


def parse_claims(raw: object, cells: Sequence[dict]) -> list[Claim]:
    """Check a grid's `claims:` against its cells (dicts with name, family, coords); ValueError names the problem."""
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ValueError(f"claims must be a list of mappings with fields {sorted(CLAIM_FIELDS)}, got {raw!r}")
    names = [c["name"] for c in cells]
    families = sorted({c["family"] for c in cells if c["family"]})
    claims = []
    for index, entry in enumerate(raw):
        where = f"claims[{index}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where} must be a mapping with fields {sorted(CLAIM_FIELDS)}, got {entry!r}")
        unknown = sorted(set(entry) - CLAIM_FIELDS)
        missing = sorted({"claim", "a", "b", "metric", "direction"} - set(entry))
        if unknown or missing:
            raise ValueError(f"{where}: unknown field(s) {unknown}, missing field(s) {missing}; "
                             f"fields: {sorted(CLAIM_FIELDS)} (over only for {CRITICAL_POINT_GROWTH})")
        claim = Claim(**{k: entry.get(k) for k in CLAIM_FIELDS})
        if not isinstance(claim.claim, str) or not claim.claim.strip():
            raise ValueError(f"{where}.claim must say what the paper claims, in words")
        if claim.requires is not None and claim.requires not in REQUIREMENTS:
            raise ValueError(f"{where}.requires must be one of {list(REQUIREMENTS)}, got {claim.requires!r}")
        if claim.direction not in DIRECTIONS:
            raise ValueError(f"{where}.direction must be one of {list(DIRECTIONS)}, got {claim.direction!r}")
        metric = claim.metric
        if metric == CRITICAL_POINT_GROWTH:
            _check_growth_claim(claim, cells, families, where)
            if claim.direction != "higher":
                raise ValueError(f"{where}.direction: {CRITICAL_POINT_GROWTH} claims growth, so its direction is 'higher'")
        else:
            if not isinstance(metric, str) or not (metric in SUMMARY_METRICS or metric.startswith("val_loss/")):
                raise ValueError(f"{where}.metric must be one of {[*SUMMARY_METRICS, 'val_loss/<domain>', CRITICAL_POINT_GROWTH]}, "
                                 f"got {metric!r}")
            if claim.over is not None:
                raise ValueError(f"{where}.over applies only to metric {CRITICAL_POINT_GROWTH}")
            if claim.a in families and claim.b in families and claim.a not in names and claim.b not in names:
                claims.extend(_at_every_point(claim, cells, where))
                continue
            for side in ("a", "b"):
                if getattr(claim, side) not in names:
                    raise ValueError(f"{where}.{side}: {getattr(claim, side)!r} is not a cell of this grid; "
                                     f"cells: {names} (or, for a claim at every matrix point, families: {families})")
        if claim.a == claim.b:
            raise ValueError(f"{where}: a and b are both {claim.a!r}; a claim compares two cells")
        claims.append(claim)
    return claims


def _at_every_point(claim: Claim, cells: Sequence[dict], where: str) -> list[Claim]:
    """A claim naming two `cells` entries of a cells x matrix grid holds at every matrix point: one claim per point,
    comparing the two families' cells with the same matrix values (e.g. ResFormer vs vanilla at each length)."""
    if claim.a == claim.b:
        raise ValueError(f"{where}: a and b are both {claim.a!r}; a claim compares two cells")
    by_point = {(c["family"], tuple(sorted(c["coords"].items()))): c["name"] for c in cells}
    expanded = []
    for c in cells:
        if c["family"] != claim.a:
            continue
        point = tuple(sorted(c["coords"].items()))
        other = by_point.get((claim.b, point))
        if other is None:
            raise ValueError(f"{where}.b: {claim.b!r} has no cell at {dict(point)}, where {claim.a!r} has {c['name']!r}")
        at = ", ".join(f"{key.rsplit('.', 1)[-1]}={value}" for key, value in point)
        expanded.append(replace(claim, claim=f"{claim.claim} [{at}]", a=c["name"], b=other))
    return expanded


def _check_growth_claim(claim: Claim, cells: Sequence[dict], families: list[str], where: str) -> None:
    keys = sorted({k for c in cells for k in c["coords"]})
    if claim.over not in keys:
        raise ValueError(f"{where}.over must name a matrix key of this grid ({keys or 'it has no matrix'}), "
                         f"got {claim.over!r}")
    for side in ("a", "b"):
        if getattr(claim, side) not in families:
            raise ValueError(f"{where}.{side}: {CRITICAL_POINT_GROWTH} compares `cells` entries across the matrix; "
                             f"{getattr(claim, side)!r} is not one of {families}")
    points = [c["coords"][claim.over] for c in cells if c["family"] == claim.a]
    if len(set(points)) < 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in points):
        raise ValueError(f"{where}.over: {claim.over} needs at least two positive numeric values, got {points}")
