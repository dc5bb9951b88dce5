"""Judging the paper's claims: each comparison a grid file declares, judged on its runs (verdict, judges) within its
owner's family (judgements) and gathered across grids (scoreboard_rows), and the paper's claims derived from their
comparisons, the scoreboard's unit (paper_claims). Nothing here writes a report: lit_resformer.reports does."""
