"""A grid's report (report.md and a self-contained index.html): its sections (grid_report), the attention and
mixing-weight sections (attention), the budget table (budget), scaling sections (scaling_section) and the pieces
they are written with (document)."""

from lit_resformer.reports.grid_report import write_report

__all__ = ["write_report"]
