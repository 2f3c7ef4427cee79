"""The runpod lane."""
