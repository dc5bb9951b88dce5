"""Running runs as processes: one run's job (train or resume through the training command, record its outcome, run
its post-training steps: `jobs`), runs packed into stacks that one `fit-stacked` process trains (`stack_jobs`), and
the pools that run many jobs (`executors`: this machine's devices, or Slurm). A grid (lit_resformer.grids) and a
re-derivation hand them their runs."""
