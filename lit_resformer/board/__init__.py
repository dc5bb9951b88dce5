"""The scoreboard: the grids' verdicts gathered into the paper's claims across the committed grids, in a terminal
and as one offline page (`lit-resformer claims PATH [--html OUT]`), over the grids' reports; beside it the transfer
table (each claim by regime), the README's findings and when each deciding field was declared."""
