"""Runs stacked into one model: runs of one grid that share a recipe and a model shape train in one process, their
parameters along a leading run dimension (torch.func), one step for all of them, each run still its own.

- rules: which runs may share a stack (the fields that may differ between them) and which settings a run needs;
- engine: the stacked parameters, the vmapped loss, per-run gradient clipping, the step as one CUDA graph;
- trainer: `lit-resformer fit-stacked`, every run set up by `fit`'s own CLI and kept by its own Lightning trainer
  (checkpoints, logs, schedule, data order), the steps taken together.
The grid runner's side (which of a grid's runs train together, and one stack as one job) is
lit_resformer.execution.stack_jobs.

A stacked run is the same run: its initialisation, data order, gradient clipping, optimizer state, learning-rate
schedule, checkpoints, metrics, summary and identity are the ones `lit-resformer fit` gives it alone, so its run
directory is read, shared, resumed (alone or stacked) and judged exactly like a solo run's.
"""
