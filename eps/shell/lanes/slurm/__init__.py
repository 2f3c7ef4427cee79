"""The slurm lane."""
