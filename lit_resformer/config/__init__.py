"""The config language: experiment files that compose (files), one-line messages for config mistakes (messages),
field-by-field differences (diff) and which classes a config may name (trust). Checking a config the way `fit`
does is lit_resformer.training.checker."""
