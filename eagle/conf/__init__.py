"""Hydra configs of eagle-run (a package so Hydra finds them installed or not)."""
