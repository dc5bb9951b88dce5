"""How long the board takes: `lit-resformer claims docs/results` and `claims docs/results --html OUT`, each in a fresh
process, as a user runs them.

The board judges every committed grid; a grid's verdicts are kept in the verdict cache under the content of its runs,
its grid file and the package's source (lit_resformer/verdicts/verdict_cache.py), so a second call reads them back.
The warm-up rounds fill that cache; the counted rounds are the warm board, the one a reader waits for (target in
`targets.py`: <= 5 s). Beside them, once, for scale: the cold board, judged from nothing into an empty cache (what the
first call after a change to the package or to the results costs). `--quick` times the plumbing on one small grid.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

from . import targets
from .harness import ROOT, Metric, Result, Settings, interleaved, markdown_table, median, spread, target_mark

NAME = "claims_board"
RESULTS = ROOT / "docs" / "results"
QUICK_GRID = RESULTS / "demo-repro"  # one small grid: the plumbing, not a measurement
CACHE_ENV = "LIT_RESFORMER_VERDICT_CACHE"  # lit_resformer.verdicts.verdict_cache.VERDICT_CACHE_ENV


def board(args: list[str], env: dict[str, str] | None = None) -> None:
    """`lit-resformer claims ARGS` in a fresh interpreter; an error unless it wrote its board."""
    done = subprocess.run([sys.executable, "-m", "lit_resformer.cli", "claims", *args], cwd=ROOT, capture_output=True,
                          text=True, env=env)
    if done.returncode != 0:
        raise RuntimeError(f"lit-resformer claims {' '.join(args)} failed: exit {done.returncode}, "
                           f"stderr {done.stderr[-500:]!r}")


def run(settings: Settings) -> Result:
    results = QUICK_GRID if settings.quick else RESULTS
    with tempfile.TemporaryDirectory(prefix="bench-claims-") as tmp:
        page = Path(tmp) / "board.html"
        commands = {"claims": [str(results)], "claims_html": [str(results), "--html", str(page)]}
        times = interleaved({name: partial(board, args) for name, args in commands.items()}, settings,
                            warmup=max(settings.warmup, 1))  # the first call fills the cache
        cold: dict[str, float] = {}
        if not settings.quick:
            empty = Path(tmp) / "empty-cache"
            start = time.perf_counter()
            board(commands["claims"], env={**os.environ, CACHE_ENV: str(empty)})
            cold["claims"] = time.perf_counter() - start
    shown = {"claims": f"`lit-resformer claims {results.relative_to(ROOT)}`",
             "claims_html": f"`lit-resformer claims {results.relative_to(ROOT)} --html OUT`"}
    # metric names: claims_board.warm.<command> (the target applies), claims_board.cold.claims (once, for scale)
    metrics = {name: Metric(f"{NAME}.warm.{name}", median(values), "s", targets.target(f"{NAME}.warm", settings.cuda))
               for name, values in times.items()}
    rows = [[shown[name], "cached", m.value, spread(times[name]), target_mark(m)] for name, m in metrics.items()]
    for name, seconds in cold.items():
        metric = Metric(f"{NAME}.cold.{name}", seconds, "s")
        metrics[f"cold.{name}"] = metric
        rows.append([shown[name], "empty cache (once)", seconds, "–", ""])
    markdown = (
        "Wall seconds of `python -m lit_resformer.cli claims ...` in a fresh process (median over rounds, after a "
        "warm-up round that fills the verdict cache), and once from an empty cache for scale.\n\n"
        + markdown_table(["command", "verdicts", "seconds", "spread (IQR)", "target"], rows)
    )
    return Result(NAME, list(metrics.values()), markdown)
