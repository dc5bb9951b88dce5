"""What a run is and what a grid leaves behind, for everything that trains, judges or reports runs to read:

    identity.py    run_identity: what makes two runs the same run
    summary.py     a finished run's summary.json (its results, computed once from its logged metrics)
    directory.py   GridDir: a grid's folder of runs and its manifest (the claims it stores included)
    claim_spec.py  the comparisons a grid declares (`claims:`), checked against its cells
    results.py     GridResults: a grid's runs loaded once (the one definition of a final loss)
    archive.py     export-results / merge-results: a grid's results carried between machines

A run's own files are lit_resformer.training.run_dir.RunDir's (training writes them). Grids, measures, verdicts and
reports import this package; it imports none of them.
"""
