"""The gcp lane."""
