"""The package version and the checkpoint format version (one place for both)."""

__version__ = "0.1.0"

#: format of ``checkpoints/step_N`` directories written by this release (``meta.json``'s
#: ``format_version``). 1: before versions were written; 2: ``meta.json`` names both versions,
#: env states carry ``reseeds`` instead of generator states. Older formats are upgraded on load
#: (:data:`pytorchrl.utils.checkpoint.UPGRADES`); newer ones are refused with one line.
CHECKPOINT_FORMAT = 2
