"""What is measured on a grid's finished runs: the runs loaded once (grid_results), the statistics of seeds and
comparisons (stats), scaling-law fits and their equivalence savings (scaling) and time-to-target data savings
(time_to_target). Judging the paper's claims on these is lit_resformer.verdicts."""
