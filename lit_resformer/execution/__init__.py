"""Running runs as processes: one run's job (train or resume through the training command, record its outcome, run
its post-training steps: `jobs`) and the pools that run many (`executors`: this machine's devices, or Slurm). A grid
(lit_resformer.grids) and a re-derivation hand them their runs; a stack of runs is a job of its own
(lit_resformer.stacking.stack_jobs)."""
