"""The config language: experiment files that compose (files), one-line messages for config mistakes (messages),
field-by-field differences (diff), which classes a config may name (trust), and the suite's command-line parser that
takes options only as written (options). Checking a config the way `fit`
does is lit_resformer.training.config_checker."""
