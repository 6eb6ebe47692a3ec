"""Holm-adjusted verdicts for summaries written before `resmem sweep` reported them.

The earlier design's summaries (docs/experiments/{memoryformer-vs-dense,hybrid,residual-widening,
stability}.json) give each declared comparison's per-seed differences but no p-value. This reads
each comparison's first metric, takes the paired t-test's two-sided p over its seeds, as the sweep
does, and adjusts the experiment's family of tests by Holm's step-down, as `resmem sweep` does
for summaries since 2facfd1 (crates/cli/src/stats/sequential.rs, `holm`).

    .venv-jax/bin/python experiments/holm.py docs/experiments/residual-widening.json

(`cargo xtask test` makes .venv-jax, with SciPy; any Python with SciPy runs it.)
"""

import json
import math
import sys
from statistics import mean, stdev

from scipy import stats


def holm(p):
    """Holm's step-down adjustment: the k-th smallest p times (m - k), kept monotone, at most 1."""
    order = sorted(range(len(p)), key=lambda i: p[i])
    adjusted, running = [0.0] * len(p), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        adjusted[i] = running
    return adjusted


def main(paths):
    for path in paths:
        summary = json.load(open(path))
        rows = []
        for c in summary["comparisons"]:
            m = c["metrics"][0]
            d = [x for x in m["per_seed"] if x is not None and math.isfinite(x)]
            t = mean(d) / (stdev(d) / math.sqrt(len(d)))
            p = 2 * stats.t.sf(abs(t), len(d) - 1)
            rows.append((c["a"], c["b"], m["metric"], len(d), mean(d), m["low"], m["high"], p))
        adjusted = holm([r[7] for r in rows])
        print(f"{path}: {len(rows)} tests, each on its first metric ({rows[0][2]}), Holm over the family")
        for (a, b, _, n, mu, low, high, p), q in zip(rows, adjusted):
            verdict = "not resolved" if q >= 0.05 else f"{a if mu < 0 else b} better"
            print(f"  {a} - {b}: {mu:+.4f} [{low:+.4f}, {high:+.4f}] over {n} seeds; p {p:.2g}, Holm p {q:.2g}: {verdict}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: experiments/holm.py SUMMARY.json...")
    main(sys.argv[1:])
