"""Shared fixtures: a fresh store per test, named after the pid (CI runs several suites
at once), destroyed afterwards.

The suite's TCP ports on 127.0.0.1 are 30000-30999, no other suite's (scripts/test.sh
runs the suites side by side), below Linux's ephemeral ports (32768-60999), each test
its own range (CKPTFS_TEST_PORT overrides the daemons' first port): test_torch_partner
30000-30099, test_bench_torch 30100-30199 and 30700-30799, test_torch_cluster
30200-30299, test_torch_manage 30300-30400, test_torch_netns 30500-30699 (inside its
namespaces), test_torch_s3's S3 server 30900-30999 (S3_LOCAL_PORTS)."""

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
