"""lit-resformer: ResFormer / SVFormer (value residual learning) ablations with PyTorch Lightning."""

__all__ = ["load_checkpoint"]
__version__ = "0.1.0"


def __getattr__(name: str):
    # imported on first use: `import lit_resformer.<anything>` would otherwise pay for torch and Lightning first,
    # which a command refusing bad input or reading results never needs
    if name == "load_checkpoint":
        from lit_resformer.runs.checkpoint_reading import load_checkpoint

        return load_checkpoint
    raise AttributeError(f"module 'lit_resformer' has no attribute {name!r}")
