"""`resmem export tensorboard` read back by TensorBoard itself.

resmem trains a tiny run, exports its metrics.jsonl as an event file, and TensorBoard's own
reader (EventAccumulator) must find every numeric field of every row as a scalar at its step,
equal to the row's value in f32. A missing tool (tensorboard, the resmem binary) is a failure,
never a skip. The binary is $RESMEM, by default target/release/resmem of this checkout.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from binary import run as resmem


def test_tensorboard_reads_every_metric_at_its_step():
    with tempfile.TemporaryDirectory() as tmp:
        run, out = Path(tmp) / "r", Path(tmp) / "tb" / "r"
        resmem("train", "--arch", "hc", "--task", "copy", "--steps", "12", "--eval-every", "4",
               "--log-every", "2", "--backend", "cpu", "--out", str(run))
        said = resmem("export", "tensorboard", "--run", str(run), "--out", str(out)).stdout
        assert "tensorboard --logdir" in said, said
        rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
        reader = EventAccumulator(str(out))
        reader.Reload()
        tags = set(reader.Tags()["scalars"])
        for row in rows:
            for key, value in row.items():
                if key in ("step", "elapsed_s") or not isinstance(value, (int, float)):
                    continue
                assert key in tags, f"{key} is not among TensorBoard's scalars {sorted(tags)}"
                at = {e.step: e.value for e in reader.Scalars(key)}
                assert at[row["step"]] == np.float32(value), (key, row["step"], at[row["step"]], value)
        assert {"loss", "val_loss", "lr", "grad_norm"} <= tags, sorted(tags)
        assert [e.step for e in reader.Scalars("loss")] == [r["step"] for r in rows if "loss" in r]
        # A second export into the same directory is refused: TensorBoard would show both.
        again = resmem("export", "tensorboard", "--run", str(run), "--out", str(out), ok=False)
        assert "holds an event file" in again.stderr, again.stderr


if __name__ == "__main__":
    test_tensorboard_reads_every_metric_at_its_step()
    print("ok")
