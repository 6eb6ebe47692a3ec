"""resmem's models in JAX: read a resmem run (config.toml, model.safetensors), compute the
logits resmem's CPU backend computes, and write the run back under resmem's names."""

from .models import ARCHS, Config, Model, from_run, to_tensors
from .run import Run, load_run, read_tensors, save_run, write_tensors

__all__ = ["ARCHS", "Config", "Model", "Run", "from_run", "load_run", "read_tensors", "save_run", "to_tensors", "write_tensors"]
