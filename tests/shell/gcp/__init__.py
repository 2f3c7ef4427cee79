"""GCP lane tests (a package so its helper modules never clash with other lanes' tests)."""
