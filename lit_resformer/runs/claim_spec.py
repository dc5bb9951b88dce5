"""The claims a grid file declares: the paper's claims for its figure, checked against the grid's cells when the
grid is loaded (lit_resformer.grids.spec) and judged on its runs by lit_resformer.verdicts.judges.

    claims:
      - claim: ResFormer ends with a lower validation loss than vanilla     # the paper's claim, in words
        a: resformer            # the cell the claim is about (in a cells x matrix grid, a `cells` entry:
        b: vanilla              # the cell it is compared with    the claim is then judged at every matrix point)
        metric: val_loss        # see METRICS below
        direction: lower        # a's metric is lower (or higher) than b's
        paper: "-0.027 nats at 82M (Table 5)"   # optional: the paper's own effect, shown beside ours
      - claim: ResFormer is ahead of vanilla throughout training
        a: resformer
        b: vanilla
        metric: val_loss
        at: throughout          # optional, val_loss: every evaluation after warm-up (see AT below); default end
        direction: lower
      - claim: SVFormer's critical point grows with the training length
        a: svformer             # critical_point_growth, val_loss_gap_slope: `cells` entries of a cells x matrix grid
        b: vanilla
        metric: critical_point_growth
        over: data.seq_len      # the matrix key along which it grows
        direction: higher
      - claim: SVFormer is overtaken by vanilla by the end of training
        a: svformer
        b: vanilla
        metric: val_loss
        direction: higher
        requires: crossing      # optional: judged only where the grid's baseline (vanilla) has overtaken every
                                # SVFormer run of the comparison in training loss, else "not tested"
      - claim: a learnable mixing scalar beats the fixed mix
        ...
        beyond_paper: true      # optional: a claim from outside the paper (its own section of the scoreboard)
      - claim: a residual on queries gives no gain over vanilla (Fig. 9)
        a: residual-q
        b: vanilla
        metric: val_loss
        direction: higher       # with a margin: a - b is above -margin (no gain larger than the margin)
        margin: 0.0272          # optional, nats: the gain half of an equivalence test (see MARGIN below)
        paper_claim: fig9-only-values   # the paper claim (configs/claims.yaml) this comparison is evidence for
      - claim: SVFormer with more anchors is better
        ...
        quote: '“we find that increasing the number of "anchors" improves performance” (review l. ≈522–524)'
                                # optional: the paper's words in “…”, each followed by its location, as in
                                # configs/claims.yaml (for a claim beyond the paper, its source's words); needed where
                                # the comparison was declared or changed after its results were seen
      - claim: ResFormer reaches vanilla's final validation loss with less data
        a: resformer
        b: vanilla
        metric: time_to_target  # a's data saving 1 - tokens(a) / tokens(b) to first reach the target loss
        direction: higher       # higher: a needs less data
        target: 4.2             # optional, this metric only: the loss to reach (default: each seed's b final loss)

Every comparison names its paper claim (`paper_claim:`, an id of configs/claims.yaml, lit_resformer.verdicts.
paper_claims): the claim is the unit of the scoreboard, and its verdict is derived from its comparisons there.
MARGIN: a comparison with `margin: m` tests a bound, not zero: direction higher claims a - b > -m ("no gain of
more than m"), lower claims a - b < +m. It is judged by the same two-sided interval and alpha as any other:
reproduced when the interval lies on the claimed side of the bound, contradicted when it lies on the other side.

METRICS (each judged per seed; one entry of METRIC_KINDS per kind, and lit_resformer.verdicts.judges.JUDGING
says how each kind is judged and shown):
  val_loss, train_loss, val_loss/<domain>   the run's final values (its summary)
  critical_point_growth    slope of log2 critical step against log2 of `over` (direction higher)
  val_loss_gap_slope       slope of the final validation-loss gap a - b against log2 of `over`
  analysis/<name>          a per-layer attention metric of the run's analysis results (`lit-resformer analyze`),
                           averaged over the middle layers; names in ANALYSIS_METRICS
  equivalence_saving       a size sweep's fitted parameter saving of a over b (judged by lit_resformer.measures.scaling)
  time_to_target, time_to_target/<domain>
                           a's data saving against b at a target loss, read along each run's validation curve (the
                           whole or one domain's): 1 - tokens(a) / tokens(b) to first reach it, per seed
                           (lit_resformer.measures.time_to_target); the target is each seed's b final loss, or a
                           stated `target: <loss>` (only for this metric); direction higher = a needs less data;
                           no `at` or `over`
  val_loss_each_at_best    a at its best point and b at its best, as the grid's `select:` block chose them from its
                           pilot seeds (lit_resformer.grids.selection), compared on the confirmation seeds only
  val_loss_at_b_best       a and b both at b's best point, on the confirmation seeds
  val_loss_gap_dependence  the slope of the final validation-loss gap a - b against log2 of `over`, per seed, over
                           the cells that have `over` as a matrix key; direction `either`: a two-sided claim that
                           the gap depends on `over` (the slope is not zero), never contradicted by a test against zero
  val_loss_each_at_best_slope
                           a grid whose `select:` block chooses each arm's point at each value of `over` (its `per`,
                           a ladder's budgets): per confirmation seed, the slope of the final validation-loss gap a - b,
                           each at its best point there, against log2 of `over`; direction `either` (the tuned gap
                           changes with `over`)
  val_loss_gap_difference  per seed, the final validation-loss gap a - b at the second value of `over` (a matrix key
                           with exactly two values, e.g. two schedules) minus the gap at the first; direction `flat`
                           with a margin: the gap does not depend on `over` (reproduced when the interval lies within
                           +-margin, contradicted when it lies clear of it)
  data_saving_slope        a ladder's (lit_resformer.grids.spec.Ladder) per-seed data saving of a over b at the end of each
                           rung's decay, 1 - B / B' where b reaches a's loss at budget B', and its slope against
                           log2 of `over` (the budget); direction `flat`: the saving is constant (contradicted when the
                           slope's interval excludes zero, reproduced when it lies within +-margin)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace

CRITICAL_POINT_GROWTH = "critical_point_growth"
GAP_SLOPE = "val_loss_gap_slope"
EQUIVALENCE_SAVING = "equivalence_saving"
# time_to_target[/<domain>]: a's data saving against b at b's final (or a stated) loss. The same string as
# lit_resformer.measures.time_to_target.METRIC (a test checks it): grids do not import the verdicts.
TIME_TO_TARGET = "time_to_target"
EACH_AT_BEST = "val_loss_each_at_best"
AT_B_BEST = "val_loss_at_b_best"
GAP_DEPENDENCE = "val_loss_gap_dependence"
EACH_AT_BEST_SLOPE = "val_loss_each_at_best_slope"
GAP_DIFFERENCE = "val_loss_gap_difference"
DATA_SAVING_SLOPE = "data_saving_slope"
ANALYSIS_PREFIX = "analysis/"
# analysis/<name>: what each reads from a run's analysis.json (lit_resformer.analysis.analyze) and why it is a claim
ANALYSIS_METRICS = {
    "entropy": "entropy of token importance (Eq. 11; higher = attention less concentrated)",
    "first_token_importance": "first token's importance / the other tokens' (lower = a weaker attention sink)",
    "first_token_value_norm": "first token's value norm / the other tokens' (higher = no value-state drain)",
    "first_token_hidden_norm": "first token's hidden-state norm / the other tokens' (lower = no hidden-state peak)",
    "top_eigenvalue": "largest eigenvalue of the value states' second moment (Eq. 12), on the mixed value",
    "raw_value_top_eigenvalue": "largest eigenvalue of the raw V_n's second moment (Eq. 12, before any mixing)",
    "raw_value_top_eigenvalue_share": "the raw V_n's largest eigenvalue over its second moment's trace (scale-free)",
    # Fig. 4, within each run of one cell (a = b): cosine of the Eq. 2 output to the Eq. 4 output (a's side) and to the
    # Eq. 6 output (b's side), mean over layers 2..L
    "fig4_cos_eq4_vs_eq6": "cosine of the Eq. 2 (cross-layer attention) output to the Eq. 4 output, against its "
                           "cosine to the Eq. 6 (identity) output, layers 2..L (Fig. 4)",
}
SAME_CELL_METRICS = ("analysis/fig4_cos_eq4_vs_eq6",)  # compare two quantities of the same runs (a = b)
NATS = "nats"  # the unit of a loss and of a difference of losses (the summary metrics')
SUMMARY_METRICS = ("val_loss", "train_loss")  # and val_loss/<domain>: final values in each run's summary.json
DIRECTIONS = ("lower", "higher")
EITHER = "either"  # a two-sided claim that a quantity depends on `over` (its slope is not zero), either way
FLAT = "flat"  # a claim that a quantity does not depend on `over` (its slope is zero, within the claim's margin)
REQUIREMENTS = ("crossing",)  # preconditions a claim may name: `requires: crossing` (see the module docstring)
# AT: where on the run a val_loss or train_loss claim is judged: `end` (default) the final value; `warmup` the first
# evaluation (val_loss) or logged step (train_loss, smoothed) at or after the end of warm-up; `throughout` (val_loss)
# every evaluation after warm-up.
AT = {"end": SUMMARY_METRICS, "warmup": SUMMARY_METRICS, "throughout": ("val_loss",)}


@dataclass(frozen=True)
class MetricKind:
    """One kind of claim metric: the `metric:` values it covers, what its `a` and `b` name and which optional fields
    it takes. How it is judged and shown is lit_resformer.verdicts.judges.JUDGING[key]: the verdicts sit above the
    grids, which check claims when a grid loads (a test checks that both tables name the same kinds)."""

    key: str
    unit: str  # what a difference a - b of it (and its interval, its minimum detectable effect) is measured in
    names: tuple[str, ...] = ()  # its metric values, exactly
    prefix: str = ""  # and the values <prefix><suffix>, for these suffixes (none listed: any domain of the corpus)
    suffixes: tuple[str, ...] = ()
    across: str = ""  # a and b are `cells` entries compared across this ("the matrix"); "": cells (see parse_claims)
    takes: frozenset[str] = frozenset({"margin"})  # which of KIND_FIELDS apply
    direction: str | None = None  # the one direction it can claim (None: any of `directions`)
    directions: tuple[str, ...] = DIRECTIONS  # the directions it can claim
    two_points: bool = False  # its `over` is a matrix key of exactly two values, of any type (else numeric, > 0)

    def covers(self, metric: str) -> bool:
        suffix = metric.removeprefix(self.prefix) if self.prefix and metric.startswith(self.prefix) else None
        return metric in self.names or bool(suffix) and (not self.suffixes or suffix in self.suffixes)

    def shown(self) -> list[str]:
        """Its metric values as an error message lists them."""
        return [*self.names, *((self.prefix + s for s in self.suffixes or ("<domain>",)) if self.prefix else ())]


KIND_FIELDS = ("over", "target", "margin")  # optional fields that only some metric kinds take (MetricKind.takes)
# The metric kinds, in the order an error lists them; a new kind is an entry here, one in JUDGING and a METRICS line.
METRIC_KINDS = (
    MetricKind("summary", NATS, names=SUMMARY_METRICS, prefix="val_loss/"),
    MetricKind(CRITICAL_POINT_GROWTH, "log2 critical step per doubling", names=(CRITICAL_POINT_GROWTH,),
               across="the matrix", takes=frozenset({"over", "margin"}), direction="higher"),
    MetricKind(GAP_SLOPE, "nats per doubling", names=(GAP_SLOPE,), across="the matrix",
               takes=frozenset({"over", "margin"})),
    MetricKind("analysis", "the analysis measure's own scale", prefix=ANALYSIS_PREFIX,
               suffixes=tuple(ANALYSIS_METRICS)),
    MetricKind(EQUIVALENCE_SAVING, "fraction of parameters", names=(EQUIVALENCE_SAVING,), across="the sweep"),
    # it reads the whole validation curve against the target: no `at`, `over` or `margin`
    MetricKind(TIME_TO_TARGET, "fraction of tokens", names=(TIME_TO_TARGET,), prefix=TIME_TO_TARGET + "/",
               takes=frozenset({"target"})),
    # a and b at the points a grid's `select:` block chose (spec checks that they are its arms)
    MetricKind(EACH_AT_BEST, NATS, names=(EACH_AT_BEST,), across="the selection"),
    MetricKind(AT_B_BEST, NATS, names=(AT_B_BEST,), across="the selection"),
    MetricKind(GAP_DEPENDENCE, "nats per doubling", names=(GAP_DEPENDENCE,), across="the matrix",
               takes=frozenset({"over"}), directions=(EITHER,)),
    MetricKind(EACH_AT_BEST_SLOPE, "nats per doubling", names=(EACH_AT_BEST_SLOPE,), across="the selection",
               takes=frozenset({"over"}), directions=(EITHER,)),
    MetricKind(GAP_DIFFERENCE, NATS, names=(GAP_DIFFERENCE,), across="the matrix", takes=frozenset({"over", "margin"}),
               directions=(FLAT,), two_points=True),
    MetricKind(DATA_SAVING_SLOPE, "fraction of tokens per doubling", names=(DATA_SAVING_SLOPE,), across="the matrix",
               takes=frozenset({"over", "margin"}), directions=(FLAT,)),
)
SELECTED_METRICS = (EACH_AT_BEST, AT_B_BEST, EACH_AT_BEST_SLOPE)


def metric_kind(metric: object) -> MetricKind | None:
    """The kind of a `metric:` value (None: no kind covers it)."""
    return next((k for k in METRIC_KINDS if isinstance(metric, str) and k.covers(metric)), None)


def metrics_taking(field: str) -> list[str]:
    """The metric values of the kinds that take an optional field of KIND_FIELDS."""
    return [m for k in METRIC_KINDS if field in k.takes for m in k.shown()]


CLAIM_FIELDS = {"claim", "a", "b", "metric", "direction", "over", "requires", "at", "paper", "beyond_paper",
                "paper_claim", "margin", "target", "quote"}
REQUIRED_FIELDS = {"claim", "a", "b", "metric", "direction"}


@dataclass(frozen=True)
class Claim:
    claim: str
    a: str
    b: str
    metric: str
    direction: str
    over: str | None = None  # the matrix key of a metric across the matrix (the kinds that take "over")
    requires: str | None = None  # a precondition of the comparison (REQUIREMENTS), checked on the runs
    at: str | None = None  # where on the run (AT); None is the end
    paper: str | None = None  # the effect the paper (or, beyond it, the claim's source) reports, in words
    beyond_paper: bool | None = None  # a claim from outside the paper
    paper_claim: str | None = None  # the id of the paper claim (configs/claims.yaml) this comparison is evidence for
    margin: float | None = None  # nats: the claim is a bound -margin (higher) / +margin (lower), not zero (MARGIN)
    target: float | None = None  # time_to_target only: the loss to reach (None: each seed's b final loss)
    # the paper's sentence this comparison states, where it was declared or changed after its results were seen
    # (lit_resformer.board.declared); it decides nothing
    quote: str | None = None
    # where a claim at chosen points is judged when its grid's `select:` block chooses at each value of a key (its
    # `per`, a ladder's budgets): {that key: one value}. Set by parse_claims, never written in a grid file.
    per: dict | None = None

    def to_dict(self) -> dict:
        return {k: v for k, v in asdict(self).items() if v is not None}


def parse_claims(raw: object, cells: Sequence[dict], per: str | None = None) -> list[Claim]:
    """Check a grid's `claims:` against its cells (dicts with name, family, coords); ValueError names the problem.
    `per`: the key at each of whose values the grid's `select:` block chooses its points apart (a ladder's budgets):
    a claim at chosen points (val_loss_each_at_best, val_loss_at_b_best) then holds at each of its values, one claim
    per value."""
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
        missing = sorted(REQUIRED_FIELDS - set(entry))
        if unknown or missing:
            raise ValueError(f"{where}: unknown field(s) {unknown}, missing field(s) {missing}; "
                             f"fields: {sorted(CLAIM_FIELDS)} (over only for {metrics_taking('over')})")
        claim = Claim(**{k: entry.get(k) for k in CLAIM_FIELDS})
        kind = _check_fields(claim, where)
        if per is not None and claim.metric in (EACH_AT_BEST, AT_B_BEST):
            _check_families(claim, families, where, kind)
            values = sorted({c["coords"][per] for c in cells if c["family"] == claim.a and per in c["coords"]})
            claims += [replace(claim, claim=f"{claim.claim} [{per.rsplit('.', 1)[-1]}={value}]", per={per: value})
                       for value in values]
            continue
        if "over" in kind.takes:
            _check_over_claim(claim, cells, families, where, kind)
        elif kind.across:
            _check_families(claim, families, where, kind)
        else:
            if claim.a in families and claim.b in families and claim.a not in names and claim.b not in names:
                claims.extend(_at_every_point(claim, cells, where))
                continue
            for side in ("a", "b"):
                if getattr(claim, side) not in names:
                    raise ValueError(f"{where}.{side}: {getattr(claim, side)!r} is not a cell of this grid; "
                                     f"cells: {names} (or, for a claim at every matrix point, families: {families})")
        if claim.a == claim.b and claim.metric not in SAME_CELL_METRICS:
            raise ValueError(f"{where}: a and b are both {claim.a!r}; a claim compares two cells")
        claims.append(claim)
    return claims


def _check_fields(claim: Claim, where: str) -> MetricKind:
    """Each field on its own, and which fields go with which metric; the metric's kind."""
    if not isinstance(claim.claim, str) or not claim.claim.strip():
        raise ValueError(f"{where}.claim must say what the paper claims, in words")
    if claim.paper is not None and (not isinstance(claim.paper, str) or not claim.paper.strip()):
        raise ValueError(f"{where}.paper must give the paper's effect in words (e.g. '-0.027 at 82M (Table 5)'), "
                         f"got {claim.paper!r}")
    if claim.quote is not None and (not isinstance(claim.quote, str) or not claim.quote.strip()):
        raise ValueError(f"{where}.quote must be the paper's sentence (or the claim's source's) in words, "
                         f"got {claim.quote!r}")
    if claim.beyond_paper not in (None, True):
        raise ValueError(f"{where}.beyond_paper must be true (or left out for a claim of the paper), "
                         f"got {claim.beyond_paper!r}")
    if claim.paper_claim is not None and (not isinstance(claim.paper_claim, str) or not claim.paper_claim.strip()):
        raise ValueError(f"{where}.paper_claim must be an id of configs/claims.yaml, got {claim.paper_claim!r}")
    if claim.margin is not None and (isinstance(claim.margin, bool) or not isinstance(claim.margin, (int, float))
                                     or not claim.margin > 0):
        raise ValueError(f"{where}.margin must be a positive number of nats, got {claim.margin!r}")
    if claim.requires is not None and claim.requires not in REQUIREMENTS:
        raise ValueError(f"{where}.requires must be one of {list(REQUIREMENTS)}, got {claim.requires!r}")
    metric = claim.metric
    kind = metric_kind(metric)
    if kind is None:
        allowed = [m for k in METRIC_KINDS for m in k.shown()]
        raise ValueError(f"{where}.metric must be one of {allowed}, got {metric!r}")
    if claim.direction not in kind.directions:
        raise ValueError(f"{where}.direction must be one of {list(kind.directions)}"
                         f"{'' if kind.directions == DIRECTIONS else f' for {metric}'}, got {claim.direction!r}")
    for name in KIND_FIELDS:
        if getattr(claim, name) is not None and name not in kind.takes:
            raise ValueError(f"{where}.{name} applies only to metrics {metrics_taking(name)}, not {metric!r}")
    if claim.at is not None:
        if claim.at not in AT:
            raise ValueError(f"{where}.at must be one of {list(AT)}, got {claim.at!r}")
        if metric not in AT[claim.at]:
            raise ValueError(f"{where}.at: {claim.at!r} applies to metric(s) {list(AT[claim.at])}, not {metric!r}")
    if claim.target is not None and (isinstance(claim.target, bool) or not isinstance(claim.target, (int, float))
                                     or not math.isfinite(claim.target) or not claim.target > 0):
        raise ValueError(f"{where}.target must be a positive loss in nats, got {claim.target!r}")
    if kind.direction is not None and claim.direction != kind.direction:
        raise ValueError(f"{where}.direction: {metric} is claimed {kind.direction!r} only, got {claim.direction!r}")
    return kind


def _at_every_point(claim: Claim, cells: Sequence[dict], where: str) -> list[Claim]:
    """A claim naming two `cells` entries of a cells x matrix grid holds at every matrix point: one claim per point,
    comparing the two families' cells with the same matrix values (e.g. ResFormer vs vanilla at each length)."""
    if claim.a == claim.b:
        raise ValueError(f"{where}: a and b are both {claim.a!r}; a claim compares two cells")
    by_point = {(c["family"], tuple(sorted(c["coords"].items()))): c["name"] for c in cells}
    expanded = []
    for c in cells:
        if c["family"] != claim.a or not c["coords"]:  # no point: a ladder's trunk, measured only through its rungs
            continue
        point = tuple(sorted(c["coords"].items()))
        other = by_point.get((claim.b, point))
        if other is None:
            raise ValueError(f"{where}.b: {claim.b!r} has no cell at {dict(point)}, where {claim.a!r} has {c['name']!r}")
        at = ", ".join(f"{key.rsplit('.', 1)[-1]}={value}" for key, value in point)
        expanded.append(replace(claim, claim=f"{claim.claim} [{at}]", a=c["name"], b=other))
    return expanded


def _check_families(claim: Claim, families: list[str], where: str, kind: MetricKind) -> None:
    """a and b of a kind compared across the matrix or a sweep are `cells` entries."""
    for side in ("a", "b"):
        if getattr(claim, side) not in families:
            raise ValueError(f"{where}.{side}: {claim.metric} compares `cells` entries across {kind.across}; "
                             f"{getattr(claim, side)!r} is not one of {families}")


def _check_over_claim(claim: Claim, cells: Sequence[dict], families: list[str], where: str,
                      kind: MetricKind) -> None:
    keys = sorted({k for c in cells for k in c["coords"]})
    if claim.over not in keys:
        raise ValueError(f"{where}.over must name a matrix key of this grid ({keys or 'it has no matrix'}), "
                         f"got {claim.over!r}")
    _check_families(claim, families, where, kind)
    points = [c["coords"][claim.over] for c in cells if c["family"] == claim.a and claim.over in c["coords"]]
    if kind.two_points:
        if len(set(map(repr, points))) != 2:
            raise ValueError(f"{where}.over: {claim.metric} compares two values of {claim.over}, got "
                             f"{list(dict.fromkeys(points))}")
    elif len(set(points)) < 2 or not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
                                         for v in points):
        raise ValueError(f"{where}.over: {claim.over} needs at least two positive numeric values, got {points}")
