"""Each arm's row of a sweep's summary: its cost, its tuned setting and its test loss over seeds.

Reads a summary.json (a sweep's directory's, or its copy under docs/experiments) and prints a
Markdown table: parameters, forward FLOPs a token, the tuned settings, the test loss's mean, sd,
min and max over the arm's finished runs, their median wall time and how many seeds. Then, for
each declared comparison, the sd of its first metric's per-seed differences over the seeds it
was decided on and the smallest difference it detects at 80% power, 2.8·sd/√n (the rule of
docs/experiments.md). Standard library only.

    python3 experiments/arms.py docs/experiments/routing.json
"""

import json
import statistics
import sys


def main(path):
    summary = json.load(open(path))
    tuned = {t["arm"]: ", ".join(f"{k} {v}" for k, v in t["chosen"]) for t in summary.get("tuning", [])}
    arms = {}
    for p in summary["points"]:
        if p.get("status") == "done" and p.get("test_loss") is not None:
            arm = ",".join(f"{k}={v}" for k, v in p["settings"].items() if k != "seed")
            arms.setdefault(arm, []).append(p)
    print("| arm | parameters | FLOPs/token | tuned | test loss, mean | sd | min | max | wall s, median | seeds |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for arm, points in arms.items():
        loss = [p["test_loss"] for p in points]
        wall = [p["wall_s"] for p in points]
        sd = statistics.stdev(loss) if len(loss) > 1 else float("nan")
        print(
            f"| {arm} | {points[0]['params']:,} | {int(points[0]['flops_per_token']):,} | {tuned.get(arm, '–')} "
            f"| {statistics.mean(loss):.4f} | {sd:.4f} | {min(loss):.4f} | {max(loss):.4f} "
            f"| {statistics.median(wall):.0f} | {len(loss)} |"
        )
    print()
    for c in summary.get("comparisons", []):
        m = c["metrics"][0]
        d = m["per_seed"]
        sd = statistics.stdev(d)
        print(
            f"{c['a']} against {c['b']}: {m['metric']} over {len(d)} seeds, sd of the differences {sd:.4f}, "
            f"smallest detectable {2.8 * sd / len(d) ** 0.5:.4f}"
        )


if __name__ == "__main__":
    main(sys.argv[1])
