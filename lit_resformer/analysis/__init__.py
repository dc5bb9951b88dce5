"""Attention-concentration analysis (paper §4.1.3-4.5).

metrics.py  the measures as functions on tensors (importance entropy, similarity, norms, spectra, Fig. 4)
trace.py    AnalysisTrace: reduces a model's per-layer internals on the fly (bounded memory)
runner.py   analyze / analyze_checkpoints -> analysis.json + PNGs (schema in its docstring)
plots.py    the PNGs of one report
"""

from lit_resformer.analysis.analyze import (
    analyze,
    analyze_checkpoints,
    analyze_hf_model,
    analyze_model,
    analyze_run_dir,
    default_output_dir,
    load_hf_causal_lm,
    sample_validation_batches,
)
from lit_resformer.analysis.trace import AnalysisTrace

__all__ = [
    "AnalysisTrace", "analyze", "analyze_run_dir", "analyze_checkpoints", "analyze_hf_model", "analyze_model",
    "default_output_dir",
    "load_hf_causal_lm", "sample_validation_batches",
]
