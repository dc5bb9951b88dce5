"""Judging a grid's finished runs: its results loaded once (results), the statistics (stats), the paper's claims and
the scoreboard across grids (claims) and scaling-law fits with their savings (scaling). Nothing here writes a
report: lit_resformer.reports does."""
