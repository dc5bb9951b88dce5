"""Which family judges each comparison, and the families adjusted: a grid's verdicts as its report and the board
show them (`evaluate_grid`, `Judgements`).

Many comparisons are tested at once, so by chance alone some would pass: the p-values are adjusted for that, by the
suite's one rule (stats.ALPHA): Holm within each grid's family of comparisons (`p_holm`: no false verdict in the
figure with 95% probability). Each comparison is in one family: its owner's, the grid that trained its runs, where
an overlay shares them (`Judgements`). The grid report and the scoreboard (lit_resformer.verdicts.scoreboard_rows)
show the same verdict and p for a comparison; the scoreboard does not adjust again across grids. A comparison whose
runs of its cells are not all finished at the grid's seeds is not tested until they are. Each verdict carries what
its design can detect at its family's level (lit_resformer.measures.power).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path

from lit_resformer.measures.power import effect_of_interest, family_level, power_of
from lit_resformer.measures.scaling import SweepAnalysis, sweep_analysis
from lit_resformer.measures.stats import adjusted_verdict, holm
from lit_resformer.runs.claim_spec import Claim
from lit_resformer.runs.directory import GridDir
from lit_resformer.runs.results import GridResults, load_results
from lit_resformer.runs.run_dir import FINISHED
from lit_resformer.verdicts.judges import judging, scaling_verdicts
from lit_resformer.verdicts.regime import grid_regime
from lit_resformer.verdicts.verdict import Verdict
from lit_resformer.verdicts.verdict_cache import VerdictCache, grid_key


def evaluate_grid(grid: str | Path | GridResults, sweep: SweepAnalysis | None = None, index: Mapping[str, GridDir] | None = None,
                  judged: Judgements | None = None) -> list[Verdict]:
    """Verdicts on every claim of a grid's runs (the claims its manifest stores: lit_resformer.grids.spec.
    refresh_claims keeps them equal to its grid file's), each judged as its metric's kind says (JUDGING), decided on
    p-values adjusted within the grid (Holm). A comparison another grid of `index` owns (`Judgements.owner`: the grid
    that trained its runs) takes that grid's verdict and Holm p. `index` (grid name -> folder) is every grid the
    caller was given; nothing else is read. `sweep` is the scaling analysis of a sweep grid when the caller has it.
    `judged` keeps the grids judged so far for a caller that judges many (the scoreboard)."""
    results = grid if isinstance(grid, GridResults) else load_results(grid)
    judged = Judgements(index or {}) if judged is None else judged
    return judged.verdicts(results, sweep)


@dataclass(frozen=True)
class Graded:
    """One grid judged on its own runs, before any adjustment: what a grid contributes to the board, and what
    lit_resformer.verdicts.verdict_cache keeps between calls."""

    verdicts: list[Verdict]
    regime: dict
    trained_on: str

    def to_json(self) -> dict:
        return {"verdicts": [_verdict_json(v) for v in self.verdicts], "regime": self.regime,
                "trained_on": self.trained_on}

    @classmethod
    def from_json(cls, entry: dict) -> Graded:
        return cls([_verdict_from_json(v) for v in entry["verdicts"]], entry["regime"], entry["trained_on"])

    @classmethod
    def of(cls, results: GridResults, sweep: SweepAnalysis | None = None) -> Graded:
        return cls(_unadjusted_verdicts(results, sweep), grid_regime(results), results.trained_on)


class Judgements:
    """The verdicts of the grids of one index, each grid judged once. Each comparison is tested once, in one family:
    its owner's. A grid overlays runs another grid trained (the runner links them, lit_resformer.runs.identity.Twins);
    a comparison's owner is the grid that trained its `a` runs (all of them), if that grid is in the index and judges
    the same comparison (`Verdict.runs`), else the one that trained its `b` runs on the same terms, else the grid
    that shows it. Every other grid shows the owner's verdict, interval and Holm p, marked `judged_in`, and leaves it
    out of its own family. The owner is the same whichever grid asks, so no comparison has two Holm p; the families
    are built from unadjusted verdicts only, so grids that share runs with each other need no order. With a `cache`
    (lit_resformer.verdicts.verdict_cache), a grid whose runs and manifest have not changed is not judged again."""

    def __init__(self, index: Mapping[str, GridDir], cache: VerdictCache | None = None):
        self.index = dict(index)
        self.cache = cache
        self._graded: dict[str, Graded] = {}
        self._families: dict[str, list[Verdict]] = {}

    def graded(self, name: str, results: GridResults | None = None, sweep: SweepAnalysis | None = None) -> Graded:
        """Grid `name` judged on its own runs: `results` when the caller has them, else from the cache or the
        index's folder."""
        if name not in self._graded:
            if results is not None:
                self._graded[name] = Graded.of(results, sweep)
            elif self.cache is None:
                self._graded[name] = Graded.of(load_results(self.index[name]))
            else:
                key = grid_key(self.index[name])
                entry = self.cache.load(key)
                graded = Graded.from_json(entry) if entry else Graded.of(load_results(self.index[name]))
                if entry is None:
                    self.cache.store(key, graded.to_json())
                self._graded[name] = graded
        return self._graded[name]

    def unadjusted(self, name: str) -> list[Verdict]:
        return self.graded(name).verdicts

    def owner(self, v: Verdict, name: str) -> str:
        """The grid whose family tests `v` (shown in grid `name`)."""
        if v.runs is None:  # a comparison without a run identity cannot be found in another grid
            return name
        for trained in v.trained_in:
            if len(trained) != 1:
                continue
            (grid,) = trained
            if grid == name:
                return name
            if grid in self.index and any(w.runs == v.runs for w in self.unadjusted(grid)):
                return grid
        return name

    def family(self, name: str) -> list[Verdict]:
        """Grid `name`'s verdicts with its own family adjusted (Holm); those another grid owns marked `judged_in`."""
        if name not in self._families:
            marked = []
            for v in self.unadjusted(name):
                owner = self.owner(v, name)
                trained = sorted(set().union(*v.trained_in)) if v.trained_in else []
                if owner != name:
                    v = replace(v, judged_in=owner)
                elif trained and name not in trained:  # say why a comparison of another grid's runs is tested here
                    v = replace(v, note="; ".join(filter(None, [v.note, f"its runs trained in {', '.join(trained)}, "
                                                                "not among the grids given with this one: judged here"])))
                marked.append(v)
            self._families[name] = _with_power(_adjust(marked, holm, "p_holm"))
        return self._families[name]

    def verdicts(self, results: GridResults, sweep: SweepAnalysis | None = None) -> list[Verdict]:
        """A grid's verdicts as its report and the board show them (the caller's runs of it judged first)."""
        self.graded(results.name, results, sweep)
        return self.shown(results.name)

    def shown(self, name: str) -> list[Verdict]:
        """Grid `name`'s verdicts as shown: its own family's, and each comparison another grid owns with that grid's
        verdict, interval and Holm p."""
        shown = []
        for v in self.family(name):
            if not v.judged_in:
                shown.append(v)
                continue
            there = next(w for w in self.family(v.judged_in) if w.runs == v.runs)
            shown.append(replace(there, grid=v.grid, claim=v.claim, judged_in=v.judged_in, trained_in=v.trained_in,
                                 note="; ".join(filter(None, [f"judged in {v.judged_in}, which trained its runs (that "
                                                              "grid's family and Holm p)", there.note]))))
        graded = self.graded(name)
        return [replace(v, trained_on=graded.trained_on, regime=graded.regime, texts=(v.claim.claim,)) for v in shown]


def _verdict_json(v: Verdict) -> dict:
    """A verdict as JSON values, every field (what Graded.to_json stores)."""
    return {f.name: (v.claim.to_dict() if f.name == "claim" else
                     [sorted(side) for side in v.trained_in] if f.name == "trained_in" else getattr(v, f.name))
            for f in fields(Verdict)}


def _as_tuples(value):
    return tuple(_as_tuples(x) for x in value) if isinstance(value, list) else value


def _verdict_from_json(entry: dict) -> Verdict:
    return Verdict(**{**entry, "claim": Claim(**entry["claim"]), "runs": _as_tuples(entry["runs"]),
                      "trained_in": tuple(frozenset(side) for side in entry["trained_in"]),
                      "grids": tuple(entry["grids"]), "texts": tuple(entry["texts"])})


def _with_power(family: list[Verdict]) -> list[Verdict]:
    """Each verdict with its power (lit_resformer.measures.power): at its family's adjusted level, ALPHA / m for the m
    tests of the family (Holm's first step); a comparison outside the family (not tested, or judged in another grid,
    whose own power it shows) as if it were one more."""
    m = sum(v.adjustable for v in family)
    return [replace(v, power=power_of(v.design, v.n, v.df, v.low, v.high,
                                      family_level(m if v.adjustable else m + 1), effect_of_interest(v.claim),
                                      v.verdict))
            if not v.judged_in else v for v in family]


def _unadjusted_verdicts(results: GridResults, given: SweepAnalysis | None) -> list[Verdict]:
    """Every claim of the grid judged on its own runs, before any adjustment. `given` is the grid's sweep analysis
    when the caller has it; the judges get it, made here if need be, or None for a grid that is no sweep."""
    if not results.report_settings.get("scaling"):
        sweep = None
    else:
        sweep = given if given is not None else sweep_analysis(results)
    verdicts = [judging(claim).judge(claim, results, sweep) for claim in results.claims]
    if sweep is not None:
        verdicts.extend(scaling_verdicts(results, sweep))
    return [_unless_unfinished(v, results) for v in verdicts]


def _unless_unfinished(v: Verdict, results: GridResults) -> Verdict:
    """A comparison with runs of its cells not finished at the grid's seeds (a grid merged seed by seed or slice by
    slice) is not tested until they are: its verdict is read once, on every seed the grid declared, never on the
    seeds that happened to finish first. A diverged run is finished (its divergence is a result)."""
    cells = [name for name, info in results.cell_info.items()
             if {v.claim.a, v.claim.b} & {name, info.get("family")}]
    plan = results.grid_dir.progress(cells, results.manifest.get("seeds", []))
    left = [f"{cell}/seed{seed}" for state, runs in sorted(plan.items()) if state not in FINISHED
            for cell, seed in runs]
    if not left:
        return v
    why = (f"not tested: {len(left)} of the {sum(map(len, plan.values()))} runs it compares are not finished yet "
           f"({', '.join(sorted(left))}); judged once, on every seed of the grid")
    return replace(v, verdict="not tested", unadjusted="not tested", note="; ".join(filter(None, (why, v.note))))


def _adjust(verdicts: list[Verdict], method, field_name: str) -> list[Verdict]:
    """The verdicts with `field_name` set to the family's adjusted p-values (`method`: stats.holm or
    another family-wise rule) and their verdicts decided on them; the tests that did not run keep theirs."""
    family = [i for i, v in enumerate(verdicts) if v.adjustable]
    adjusted = dict(zip(family, method([verdicts[i].p_two_sided for i in family]), strict=True))
    return [replace(v, **{field_name: float(adjusted[i])}, verdict=adjusted_verdict(v.unadjusted, float(adjusted[i])))
            if i in adjusted else v for i, v in enumerate(verdicts)]
