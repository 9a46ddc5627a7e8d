"""Artifact store throughput through the real CLI against a real `aicenter up` server, compared with `cp -r`.

The benchmark starts ``aicenter up`` (SQLite, a throwaway home, ``AICENTER_DEV=1``) on a free port, creates a user,
and times the ``aicenter`` command as a subprocess, wall clock:

* ``large``: one file of ``--size-gib`` GiB of random bytes: ``dataset push`` and ``dataset pull`` vs ``cp -r``;
  the server's RSS (process and children, psutil, every 100 ms) is sampled during the push;
* ``small``: ``--small-files`` files of 1-64 KiB in 100 directories: push and pull vs ``cp -r``, files per second;
* ``dedup``: a second version with 1% of the small files rewritten; the bytes the store grew by (sum of the
  sizes of the files under store/blobs before and after) over the version's total size.

Every source is written once and read by ``cp`` first, so ``cp``, push and pull all start from a warm page cache;
all of them write on the same disk. Prints one JSON document with the storage goals and whether each is met.

    python bench/storage.py                     # 2 GiB, 10,000 small files
    python bench/storage.py --size-gib 0.25     # a quick run
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ADMIN_PASSWORD = "bench-admin-Passw0rd"
USER_PASSWORD = "bench-user-Passw0rd"
GOALS = {
    "large_push_vs_cp": 0.70,
    "large_pull_vs_cp": 0.70,
    "small_push_files_per_s": 2000,
    "small_pull_files_per_s": 2000,
    "dedup_new_bytes_ratio": 0.011,
    "max_server_rss_mib": 300,
}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _aicenter() -> str:
    beside = Path(sys.executable).with_name("aicenter")
    return str(beside) if beside.exists() else (shutil.which("aicenter") or "aicenter")


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AICENTER_")}
    env.update(extra)
    return env


class Server:
    """``aicenter up`` on a free port; ``pids`` for RSS sampling; SIGINT to stop."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        import httpx

        env = _clean_env(AICENTER_DEV="1", AICENTER_ADMIN_PASSWORD=ADMIN_PASSWORD, AICENTER_REGISTER_HOST="false")
        log = (self.home.parent / "server.log").open("wb")
        self.proc = subprocess.Popen(
            [_aicenter(), "up", "--home", str(self.home), "--port", str(self.port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"aicenter up exited: {(self.home.parent / 'server.log').read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.url}/api/v1/health", timeout=1).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise RuntimeError("aicenter up was not ready within 120 s")

    def rss_bytes(self) -> int:
        import psutil

        assert self.proc is not None
        try:
            parent = psutil.Process(self.proc.pid)
            procs = [parent, *parent.children(recursive=True)]
        except psutil.NoSuchProcess:
            return 0
        total = 0
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                total += p.memory_info().rss
        return total

    def stop(self) -> None:
        if self.proc is None:
            return
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Cli:
    def __init__(self, home: Path) -> None:
        self.env = _clean_env(AICENTER_HOME=str(home))

    def run(self, *args: str, stdin: str | None = None) -> float:
        """Run ``aicenter args``; returns its wall-clock seconds."""
        began = time.perf_counter()
        result = subprocess.run(
            [_aicenter(), *args], input=stdin, capture_output=True, text=True, env=self.env, check=False
        )
        elapsed = time.perf_counter() - began
        if result.returncode != 0:
            raise RuntimeError(f"aicenter {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
        return elapsed


class RssSampler:
    """Samples the server's RSS every 100 ms in a thread; ``max_mib`` once stopped."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.server.rss_bytes())
            self._stop.wait(0.1)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    @property
    def max_mib(self) -> float:
        return round(self.peak / (1 << 20), 1)


def _cp(src: Path, dest: Path) -> float:
    began = time.perf_counter()
    subprocess.run(["cp", "-r", str(src), str(dest)], check=True)
    return time.perf_counter() - began


def _dir_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def _write_large(path: Path, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    chunk = 64 << 20
    with open(path, "wb") as fh:
        left = size
        while left:
            n = min(chunk, left)
            fh.write(os.urandom(n))
            left -= n


def _write_small(root: Path, count: int, rng: random.Random) -> list[Path]:
    paths = []
    for i in range(count):
        path = root / f"d{i % 100:02d}" / f"f{i:05d}.bin"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(rng.randbytes(rng.randint(1024, 64 * 1024)))
        paths.append(path)
    return paths


def _mb_per_s(n_bytes: int, seconds: float) -> float:
    return round(n_bytes / 1e6 / seconds, 1)


def run(work: Path, size_gib: float, small_files: int) -> dict[str, Any]:
    server = Server(work / "server-home")
    server.home.mkdir(parents=True)
    server.start()
    try:
        cli = Cli(work / "cli-home")
        cli.run("-P", "admin", "login", "--server", server.url, "-u", "admin", "--password-stdin", stdin=ADMIN_PASSWORD)
        cli.run("-P", "admin", "user", "create", "bench", "--password-stdin", stdin=USER_PASSWORD)
        cli.run("login", "--server", server.url, "-u", "bench", "--password-stdin", stdin=USER_PASSWORD)
        return _measure(work, server, cli, size_gib, small_files)
    finally:
        server.stop()


def _measure(work: Path, server: Server, cli: Cli, size_gib: float, small_files: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    store_blobs = server.home / "store" / "blobs"

    # (a) one large file, (d) the server's RSS while it arrives
    size = int(size_gib * (1 << 30))
    large = work / "large"
    _write_large(large / "blob.bin", size)
    cp_s = _cp(large, work / "large-cp")
    shutil.rmtree(work / "large-cp")
    with RssSampler(server) as rss:
        push_s = cli.run("dataset", "push", str(large), "--name", "large", "--no-progress")
    pull_s = cli.run("dataset", "pull", "large:1", str(work / "large-pulled"), "--no-progress")
    shutil.rmtree(work / "large-pulled")
    out["large"] = {
        "bytes": size,
        "cp_s": round(cp_s, 2),
        "push_s": round(push_s, 2),
        "pull_s": round(pull_s, 2),
        "cp_mb_per_s": _mb_per_s(size, cp_s),
        "push_mb_per_s": _mb_per_s(size, push_s),
        "pull_mb_per_s": _mb_per_s(size, pull_s),
        "push_vs_cp": round(cp_s / push_s, 3),
        "pull_vs_cp": round(cp_s / pull_s, 3),
        "max_server_rss_mib_during_push": rss.max_mib,
    }

    # (b) many small files
    rng = random.Random(4)
    small = work / "small"
    paths = _write_small(small, small_files, rng)
    small_bytes = _dir_bytes(small)
    cp_s = _cp(small, work / "small-cp")
    shutil.rmtree(work / "small-cp")
    push_s = cli.run("dataset", "push", str(small), "--name", "small", "--no-progress")
    pull_s = cli.run("dataset", "pull", "small:1", str(work / "small-pulled"), "--no-progress")
    shutil.rmtree(work / "small-pulled")
    out["small"] = {
        "files": small_files,
        "bytes": small_bytes,
        "cp_s": round(cp_s, 2),
        "push_s": round(push_s, 2),
        "pull_s": round(pull_s, 2),
        "cp_files_per_s": round(small_files / cp_s),
        "push_files_per_s": round(small_files / push_s),
        "pull_files_per_s": round(small_files / pull_s),
        "push_vs_cp": round(cp_s / push_s, 3),
        "pull_vs_cp": round(cp_s / pull_s, 3),
    }

    # (c) 1% of the small files changed: what the second version adds to the store
    before = _dir_bytes(store_blobs)
    for path in rng.sample(paths, max(1, small_files // 100)):
        path.write_bytes(rng.randbytes(path.stat().st_size))
    push2_s = cli.run("dataset", "push", str(small), "--name", "small", "--no-progress")
    after = _dir_bytes(store_blobs)
    version_bytes = _dir_bytes(small)
    out["dedup"] = {
        "changed_files": max(1, small_files // 100),
        "version_bytes": version_bytes,
        "new_store_bytes": after - before,
        "new_bytes_ratio": round((after - before) / version_bytes, 5),
        "push_s": round(push2_s, 2),
    }

    met = {
        "large_push_vs_cp": out["large"]["push_vs_cp"] >= GOALS["large_push_vs_cp"],
        "large_pull_vs_cp": out["large"]["pull_vs_cp"] >= GOALS["large_pull_vs_cp"],
        "small_push_files_per_s": out["small"]["push_files_per_s"] >= GOALS["small_push_files_per_s"],
        "small_pull_files_per_s": out["small"]["pull_files_per_s"] >= GOALS["small_pull_files_per_s"],
        "dedup_new_bytes_ratio": out["dedup"]["new_bytes_ratio"] <= GOALS["dedup_new_bytes_ratio"],
        "max_server_rss_mib": out["large"]["max_server_rss_mib_during_push"] < GOALS["max_server_rss_mib"],
    }
    out["goals"] = {name: {"goal": GOALS[name], "met": ok} for name, ok in met.items()}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-gib", type=float, default=2.0, help="Size of the large file (default 2).")
    parser.add_argument("--small-files", type=int, default=10_000, help="Number of small files (default 10,000).")
    parser.add_argument("--dir", type=Path, default=None, help="Work directory (default: a temporary one).")
    parser.add_argument("--keep", action="store_true", help="Keep the work directory.")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="aicenter-bench-storage-", dir=args.dir))
    try:
        result = run(work, args.size_gib, args.small_files)
        result["config"] = {"size_gib": args.size_gib, "small_files": args.small_files, "cpus": os.cpu_count()}
        print(json.dumps(result, indent=2))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
