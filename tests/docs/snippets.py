#!/usr/bin/env python3
"""Runs every command and program that README.md and docs/*.md mark as runnable, in the
order a newcomer meets them, and checks each one's exit status and expected output, so the
documentation cannot drift from the binary.

A fenced block is runnable when its info string holds the word `runnable`:

    ```sh runnable            a shell command, run with bash -e in the newcomer's directory
    ```sh runnable repo       the same, in the repository (e.g. `cargo install --path .`)
    ```sh runnable-server     a command that serves until stopped: started in the background,
                              ready once it prints "tollgate is serving"; stopped at the end
    ```python runnable        a Python program, run with --python

An HTML comment right after a block, `<!-- expect: TEXT -->` (one or more), names text its
output must contain. What a reader replaces by hand is replaced here: `tg_live_…` by the key
the server printed, `/path/to/tollgate.db` by the database, `127.0.0.1:8787` by the address
the server listens on (a free port, so a busy 8787 never fails the run).

    python3 tests/docs/snippets.py --python VENV/bin/python --node-bin NODE22/bin \\
        [--install-root DIR]

`cargo install` installs into --install-root (CARGO_INSTALL_ROOT), whose bin/ comes first
on PATH for every block after it.
"""
import argparse
import os
import pathlib
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^```(\S*)([^\n]*)\n(.*?)^```\n((?:<!-- expect: .*? -->\n)*)", re.M | re.S)
EXPECT = re.compile(r"<!-- expect: (.*?) -->")
KEY_LINE = re.compile(r"^(tg_live_[A-Za-z0-9_-]+)$", re.M)
BLOCK_TIMEOUT = 1800  # the first `cargo install` builds everything
SERVER_WAIT = 120


class Block:
    def __init__(self, source, language, words, text, expect):
        self.source, self.language, self.words = source, language, words
        self.text, self.expect = text, expect

    def __str__(self):
        return f"{self.source}: {self.language} {' '.join(self.words)}: {self.text.strip()[:70]!r}"


def blocks():
    pages = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))
    found = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            words = match.group(2).split()
            if not any(w.startswith("runnable") for w in words):
                continue
            line = text.count("\n", 0, match.start()) + 1
            found.append(Block(f"{page.relative_to(ROOT)}:{line}", match.group(1), words,
                               match.group(3), EXPECT.findall(match.group(4))))
    return found


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Newcomer:
    """The newcomer's directory, environment and running server."""

    def __init__(self, args):
        self.args = args
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="tollgate-newcomer."))
        self.addr = f"127.0.0.1:{free_port()}"
        self.key = None
        self.server = None
        self.server_output = []
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("TOLLGATE_")}
        self.env["CARGO_TERM_COLOR"] = "never"
        self.env["TOLLGATE_HTTP_LISTEN"] = self.addr
        path = [args.node_bin] if args.node_bin else []
        if args.install_root:
            self.env["CARGO_INSTALL_ROOT"] = args.install_root
            path.insert(0, os.path.join(args.install_root, "bin"))
        self.env["PATH"] = os.pathsep.join(path + [self.env.get("PATH", "")])
        self.env["npm_config_yes"] = "true"

    def fill(self, text):
        text = text.replace("127.0.0.1:8787", self.addr)
        text = text.replace("/path/to/tollgate.db", str(self.dir / "tollgate.db"))
        if "tg_live_…" in text:
            if self.key is None:
                fail(f"a block uses tg_live_… before any server printed a key:\n{text}")
            text = text.replace("tg_live_…", self.key)
        return text

    def run(self, block):
        text = self.fill(block.text)
        cwd = ROOT if "repo" in block.words else self.dir
        if block.language == "python":
            program = self.dir / "snippet.py"
            program.write_text(text, encoding="utf-8")
            argv = [self.args.python, str(program)]
        elif block.language in ("sh", "bash", "shell"):
            argv = ["bash", "-euo", "pipefail", "-c", text]
        else:
            fail(f"{block}: cannot run a {block.language!r} block")
        if "runnable-server" in block.words:
            return self.start_server(block, argv, cwd)
        print(f"==> {block}", flush=True)
        done = subprocess.run(argv, cwd=cwd, env=self.env, capture_output=True, text=True,
                              timeout=BLOCK_TIMEOUT)
        output = done.stdout + done.stderr
        if done.returncode != 0:
            fail(f"{block} exited {done.returncode}:\n{output[-4000:]}")
        check_expected(block, output)
        print(indent(done.stdout[-1500:]), flush=True)

    def start_server(self, block, argv, cwd):
        print(f"==> {block} (in the background)", flush=True)
        self.server = subprocess.Popen(argv, cwd=cwd, env=self.env, stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, text=True)
        ready = threading.Event()

        def read():
            for line in self.server.stdout:
                self.server_output.append(line)
                if "tollgate is serving" in line:
                    ready.set()
            ready.set()

        threading.Thread(target=read, daemon=True).start()
        if not ready.wait(SERVER_WAIT) or self.server.poll() is not None:
            fail(f"{block} did not say it is serving:\n{''.join(self.server_output)[-4000:]}")
        output = "".join(self.server_output)
        keys = KEY_LINE.findall(output)
        if not keys:
            fail(f"{block} printed no admin key:\n{output}")
        self.key = keys[0]
        check_expected(block, output)
        print(indent(output[-1500:]), flush=True)

    def stop(self):
        if self.server and self.server.poll() is None:
            self.server.terminate()
            try:
                self.server.wait(10)
            except subprocess.TimeoutExpired:
                self.server.kill()
        shutil.rmtree(self.dir, ignore_errors=True)


def check_expected(block, output):
    for text in block.expect:
        if text not in output:
            fail(f"{block}: its output lacks {text!r}:\n{output[-4000:]}")


def indent(text):
    return "\n".join("    " + line for line in text.rstrip().splitlines())


def fail(message):
    print(f"snippets: {message}", file=sys.stderr, flush=True)
    raise SystemExit(1)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--node-bin", help="a directory with node and npx (Node.js 22+)")
    parser.add_argument("--install-root", help="CARGO_INSTALL_ROOT for `cargo install`")
    parser.add_argument("--skip-repo", action="store_true",
                        help="skip the blocks run in the repository (the install), using the "
                             "`tollgate` already on PATH: a quicker run while editing docs")
    args = parser.parse_args()
    for name in ("python", "node_bin", "install_root"):
        if getattr(args, name):
            setattr(args, name, os.path.abspath(getattr(args, name)))
    found = blocks()
    if not found:
        fail("no runnable block found")
    newcomer = Newcomer(args)
    started = time.monotonic()
    try:
        for block in found:
            if args.skip_repo and "repo" in block.words:
                print(f"==> {block}: skipped (--skip-repo)", flush=True)
                continue
            newcomer.run(block)
    finally:
        newcomer.stop()
    print(f"snippets: {len(found)} runnable blocks passed in {time.monotonic() - started:.0f} s")


if __name__ == "__main__":
    main()
