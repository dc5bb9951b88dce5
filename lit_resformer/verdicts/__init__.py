"""Judging the paper's claims: each comparison a grid file declares, judged on its runs under one error-control
rule (claims), and the paper's claims derived from their comparisons, the scoreboard's unit (paper_claims).
Nothing here writes a report: lit_resformer.reports does."""
