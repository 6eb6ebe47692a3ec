"""The resmem binary the tests drive: $RESMEM, by default target/release/resmem of this checkout.
A missing binary, or a command that fails where it should succeed, fails the test; nothing skips."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RESMEM = Path(os.environ.get("RESMEM", ROOT / "target" / "release" / "resmem"))


def run(*args: str, ok: bool = True) -> subprocess.CompletedProcess:
    """`resmem ARGS`, asserting it succeeds (or, with ok=False, that it fails)."""
    assert RESMEM.is_file(), f"no resmem binary at {RESMEM}: build it, or set RESMEM"
    done = subprocess.run([str(RESMEM), *args], capture_output=True, text=True)
    assert (done.returncode == 0) == ok, f"resmem {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done


def resmem(*args: str) -> str:
    """`resmem ARGS`'s standard output, asserting it succeeds."""
    return run(*args).stdout
