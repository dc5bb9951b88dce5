"""lit-resformer: ResFormer / SVFormer (value residual learning) ablations with PyTorch Lightning."""

from lit_resformer.training.checkpoint import load_checkpoint

__all__ = ["load_checkpoint"]
__version__ = "0.1.0"
