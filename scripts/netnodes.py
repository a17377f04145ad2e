"""Simulated nodes for the Python tests and benchmarks (root only): each node a network
namespace with one veth link (`eth0`, 10.X.Y.I/24) into a bridge in a namespace of its
own, and a persistent mount namespace with its own empty /dev/shm (its own ckptfs
stores). Processes run on a node through `nsenter` (`Nodes.cmd`, `popen`, `run`). A node
is lost with `lose` (its processes killed, its link down, its /dev/shm unmounted) and
replaced with `replace`; `limit` puts a tc token-bucket rate on a node's link. Nothing is
configured in the host's network namespace. The Rust tests use crate ckptfs-netsim."""

import os
import signal
import subprocess


def _sh(*args, check=True):
    r = subprocess.run(list(args), capture_output=True, text=True, timeout=60)
    if check and r.returncode != 0:
        raise AssertionError(f"{args}: {r.returncode}: {r.stderr}")
    return r


class Nodes:
    """``n`` simulated nodes (module documentation); names ``<tag><pid>...``."""

    def __init__(self, work, tag="pyt", n=2, shm_size="256m"):
        self.work = work
        self.n = n
        self.shm_size = shm_size
        self.p = f"{tag[:4]}{os.getpid() % 100000}"
        self.net = f"10.{(os.getpid() >> 8) % 200 + 20}.{os.getpid() % 250 + 1}"
        self.mnt = work / "mnt"
        self.mnt.mkdir()
        self.procs = {i: [] for i in range(1, n + 1)}
        self.up = False
        try:
            self._setup()
        except BaseException:
            self.close()
            raise

    def _setup(self):
        n = self.n
        _sh("mount", "--bind", str(self.mnt), str(self.mnt))
        _sh("mount", "--make-private", str(self.mnt))
        _sh("ip", "netns", "add", f"{self.p}br")
        self.up = True
        _sh("ip", "-n", f"{self.p}br", "link", "add", "br0", "type", "bridge")
        _sh("ip", "-n", f"{self.p}br", "link", "set", "br0", "up")
        for i in range(1, n + 1):
            ns = self.ns(i)
            _sh("ip", "netns", "add", ns)
            _sh("ip", "link", "add", f"{self.p}v{i}", "type", "veth", "peer", "name", f"{self.p}b{i}")
            _sh("ip", "link", "set", f"{self.p}v{i}", "netns", ns)
            _sh("ip", "link", "set", f"{self.p}b{i}", "netns", f"{self.p}br")
            _sh("ip", "-n", f"{self.p}br", "link", "set", f"{self.p}b{i}", "master", "br0", "up")
            _sh("ip", "-n", ns, "link", "set", f"{self.p}v{i}", "name", "eth0")
            _sh("ip", "-n", ns, "addr", "add", f"{self.addr(i)}/24", "dev", "eth0")
            _sh("ip", "-n", ns, "link", "set", "eth0", "up")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
            self.new_shm(i)

    def ns(self, i):
        return f"{self.p}n{i}"

    def addr(self, i):
        return f"{self.net}.{i}"

    def new_shm(self, i):
        """A mount namespace for node i with its own empty /dev/shm."""
        f = self.mnt / f"node{i}"
        f.touch()
        _sh("unshare", f"--mount={f}", "--propagation", "slave", "sh", "-c",
            f"mount -t tmpfs -o size={self.shm_size},mode=1777 tmpfs /dev/shm")

    def cmd(self, i, argv):
        return ["nsenter", f"--net=/run/netns/{self.ns(i)}", f"--mount={self.mnt / f'node{i}'}", "--", *argv]

    def popen(self, i, argv, env, log):
        p = subprocess.Popen(self.cmd(i, argv), env=env, cwd=self.work, stdout=log, stderr=subprocess.STDOUT,
                             start_new_session=True)
        self.procs[i].append(p)
        return p

    def run(self, i, argv, env, timeout=120):
        return subprocess.run(self.cmd(i, argv), env=env, cwd=self.work, capture_output=True, text=True,
                              timeout=timeout)

    def kill_all(self, i):
        for p in self.procs[i]:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()
        self.procs[i] = []

    def lose(self, i):
        """Node i fails: its processes die, its link goes down, its memory is gone."""
        self.kill_all(i)
        _sh("ip", "-n", self.ns(i), "link", "set", "eth0", "down")
        _sh("umount", str(self.mnt / f"node{i}"))

    def replace(self, i):
        """A replacement node i: a new empty /dev/shm, the link up again."""
        self.new_shm(i)
        _sh("ip", "-n", self.ns(i), "link", "set", "eth0", "up")

    def limit(self, i, rate):
        """A token-bucket rate limit (tc tbf, e.g. "1gbit") on node i's link; None: none."""
        _sh("tc", "-n", self.ns(i), "qdisc", "del", "dev", "eth0", "root", check=False)
        if rate:
            _sh("tc", "-n", self.ns(i), "qdisc", "add", "dev", "eth0", "root", "tbf", "rate", rate,
                "burst", "4mb", "latency", "100ms")

    def close(self):
        for i in range(1, self.n + 1):
            self.kill_all(i)
        if self.up:
            for i in range(1, self.n + 1):
                _sh("umount", str(self.mnt / f"node{i}"), check=False)
                _sh("ip", "netns", "del", self.ns(i), check=False)
            _sh("ip", "netns", "del", f"{self.p}br", check=False)
        _sh("umount", str(self.mnt), check=False)
