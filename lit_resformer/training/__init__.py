"""One training run: the LightningModule (module), `lit-resformer fit|validate|test` (lightning_cli), the checks a
config must pass before anything is written (config_checker, config_rules), writing its checkpoints
(checkpoint_saving) and process settings (runtime). The run's folder it writes into is lit_resformer.runs.run_dir's.
Nothing here imports the grids, verdicts or reports built on it."""
