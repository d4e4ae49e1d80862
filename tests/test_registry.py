"""Suite registry and on-disk cache of captured graphs."""

from __future__ import annotations

import dataclasses

import pytest

import suites
from suites.registry import SUITES, Suite, cache_key


def test_names():
    assert suites.names() == ["inception_v3", "gnmt", "bert"]


def test_unknown_suite_and_variant_list_the_valid_ones():
    with pytest.raises(suites.SuiteError, match="suites: inception_v3, gnmt, bert"):
        suites.load("resnet")
    with pytest.raises(suites.SuiteError, match="variants: default, small"):
        suites.load("bert", "tiny")


def test_first_load_captures_then_reads_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EAGLE_CACHE_DIR", str(tmp_path))
    first = suites.load("bert", "small")
    files = list(tmp_path.glob("bert-small-*.json.gz"))
    assert len(files) == 1
    again = suites.load("bert", "small")
    assert again.names == first.names
    assert again.flops.tolist() == first.flops.tolist()
    assert again.edge_bytes.tolist() == first.edge_bytes.tolist()


def test_cache_key_changes_with_the_config():
    suite = SUITES["bert"]
    bigger = dataclasses.replace(suite.configs["small"], hidden=128)
    other = Suite(suite.name, suite.module, {**suite.configs, "small": bigger})
    assert cache_key(other, "small") != cache_key(suite, "small")
    assert cache_key(suite, "small") == cache_key(suite, "small")
