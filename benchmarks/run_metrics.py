"""An fptrain run's metrics.jsonl as the benchmark scripts read it (used by
distributed/bench_tools.py and packing/packing_report.py)."""
import json
import os


def read_metrics(run):
    """(training records, eval records): a run's metrics.jsonl without its other events."""
    train, evals = [], []
    with open(os.path.join(run, "metrics.jsonl")) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                if "event" not in r:
                    train.append(r)
                elif r["event"] == "eval":
                    evals.append(r)
    return train, evals
