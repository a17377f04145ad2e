"""Shared fixtures: a fresh store per test, named after the pid (CI runs several suites
at once), destroyed afterwards."""

import itertools
import os

import pytest

import ckptfs

_counter = itertools.count()
TAG = os.environ.get("CKPTFS_TEST_TAG", "pytest")


def unique_name(what: str = "t") -> str:
    return f"{TAG}-{what}-{os.getpid()}-{next(_counter)}"


@pytest.fixture
def store_name():
    name = unique_name()
    yield name
    try:
        ckptfs.destroy(name)
    except FileNotFoundError:
        pass


@pytest.fixture
def store(store_name):
    return ckptfs.Store(store_name, mem_size="16M", chunk_size="64K", max_files=256)
