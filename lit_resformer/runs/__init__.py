"""What a run is and what a grid leaves behind, for everything that trains, judges or reports runs to read:

    run_dir.py              RunDir: every path and file of one run (below training, which writes them)
    checkpoint_reading.py   a run's checkpoint read safely, or loaded as (Transformer, tokenizer)
    curves.py               a run's logged metrics as one table, and the paper's smoothing
    identity.py             run_identity: what makes two runs the same run
    summary.py              a finished run's summary.json (its results, computed once from its logged metrics)
    directory.py            GridDir: a grid's folder of runs and its manifest (the claims it stores included)
    claim_spec.py           the comparisons a grid declares (`claims:`), checked against its cells
    results.py              GridResults: a grid's runs loaded once (the one definition of a final loss)
    archive.py              export-results / merge-results: a grid's results carried between machines

Grids, measures, verdicts and reports import this package; it imports none of them, nor training.
"""
