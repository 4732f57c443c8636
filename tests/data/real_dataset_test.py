"""scripts/make_real_dataset.py: the same seed gives the same bytes; another seed another
order and tasks, the same held-out names; no name in both splits; every line a chat example
with a non-empty user prompt and assistant response; the statistics match the files; and
fptrain's data pipeline reads the files (fptrain data with the trainer fixtures' tokenizer).

    real_dataset_test.py PYTHON FPTRAIN TOKENIZER_DIR WORK_DIR"""
import json
import os
import subprocess
import sys

PY, FPTRAIN, TOKENIZER, WORK = sys.argv[1:5]
SCRIPT = os.path.join(os.path.dirname(__file__), "..", "..", "scripts", "make_real_dataset.py")
def make(tag, seed):
    out = os.path.join(WORK, f"{tag}.jsonl")
    subprocess.run([PY, SCRIPT, "--out", out, "--seed", str(seed), "--stats", os.path.join(WORK, f"{tag}.json")],
                   check=True, capture_output=True)
    return out, os.path.join(WORK, f"{tag}-eval.jsonl"), json.load(open(os.path.join(WORK, f"{tag}.json")))


def check_lines(path):
    for line in open(path, encoding="utf-8"):
        m = json.loads(line)["messages"]
        assert [x["role"] for x in m] == ["user", "assistant"] and all(x["content"].strip() for x in m), line[:200]


def main():
    os.makedirs(WORK, exist_ok=True)
    a_train, a_eval, a_stats = make("a", 0)
    b_train, b_eval, _ = make("b", 0)
    c_train, c_eval, _ = make("c", 1)
    assert open(a_train, "rb").read() == open(b_train, "rb").read(), "the same seed gave other training data"
    assert open(a_eval, "rb").read() == open(b_eval, "rb").read(), "the same seed gave other held-out data"
    assert open(a_train, "rb").read() != open(c_train, "rb").read(), "another seed gave the same order"
    check_lines(a_train)
    check_lines(a_eval)
    c_stats = json.load(open(os.path.join(WORK, "c.json")))
    assert c_stats["eval"]["names"] == a_stats["eval"]["names"], "the held-out names depend on the seed"
    overlap = set(a_stats["eval"]["names"]) & set(a_stats["train"]["names"])
    assert not overlap, f"in both splits: {sorted(overlap)[:5]}"
    n_train = sum(1 for _ in open(a_train))
    n_eval = sum(1 for _ in open(a_eval))
    assert n_train == a_stats["train"]["words"]["examples"] and n_eval == a_stats["eval"]["words"]["examples"]
    assert n_train > 5000 and 0.02 < n_eval / (n_train + n_eval) < 0.08, (n_train, n_eval)
    cfg = os.path.join(WORK, "data.yaml")
    with open(cfg, "w") as f:
        f.write(f"model: {{path: {TOKENIZER}}}\ndata: {{train: {a_train}, eval: {a_eval}, max_length: 2048, "
                f"chat_template: llama2}}\nbatching: {{mode: pack, max_tokens: 4096}}\ntraining: {{epochs: 1}}\n"
                f"output_dir: {WORK}/run\n")
    r = subprocess.run([FPTRAIN, "data", cfg], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    print(f"real-text data: {n_train} training and {n_eval} held-out examples from "
          f"{', '.join(f'{p} {v}' for p, v in a_stats['packages'].items())}; median "
          f"{a_stats['train']['words']['median']} words; fptrain data read them")


if __name__ == "__main__":
    main()
