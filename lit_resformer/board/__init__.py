"""The scoreboard: every claim's verdict across the committed grids, in a terminal and as one offline page
(`lit-resformer claims PATH [--html OUT]`), over the grids' reports."""
