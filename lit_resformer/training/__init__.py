"""One training run: the LightningModule (module), `lit-resformer fit|validate|test` (lightning_cli), the checks a
config must pass before anything is written (checks, checker), the run directory (run_dir), its checkpoints
(checkpoint, checkpoint_saving), its logged curves (curves) and process settings (runtime). Nothing here imports
the grids, verdicts or reports built on it."""
