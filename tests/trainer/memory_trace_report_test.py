#!/usr/bin/env python3
"""benchmarks/train/memory_trace_report.py: the peer's analysis is fptrain's (the same
made-up events give what tests/trainer/memory_trace_analysis_test.cpp expects), the
side-by-side table has every group of either side, and the peer's hooks label a tiny
Llama's forward, backward and checkpoint recomputation on the CPU (the labels
recorded instead of handed to the CUDA allocator)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks", "train"))
import memory_trace_report as mtr  # noqa: E402


def groups(report, key="by_group"):
    return {g["group"]: g["bytes"] for g in report[key]}


class Analysis(unittest.TestCase):
    def test_peak_is_the_first_allocation_reaching_the_largest_total(self):
        ev = [("alloc", 1, 100, "before the step"), ("alloc", 2, 50, "forward L0 attention"),
              ("alloc", 3, 70, "forward L1 attention"), ("alloc", 4, 30, "forward L1 mlp"), ("free", 2),
              ("alloc", 5, 50, "backward L1 mlp"), ("free", 5), ("alloc", 6, 10, "optimizer")]
        r = mtr.analyse(ev)
        self.assertEqual((r["at"], r["bytes"], r["event"], r["event_tag"], r["event_bytes"]),
                         ("peak", 250, 3, "forward L1 mlp", 30))
        self.assertEqual(groups(r)["forward L* attention"], 120)
        self.assertEqual(groups(r, "allocated_in_step")["backward L* mlp"], 50)
        self.assertEqual(r["top"][0]["bytes"], 100)
        self.assertEqual([b["bytes"] for b in r["small_blocks"]], [100, 70, 50, 30])

    def test_names_reach_the_block_alive_when_given(self):
        ev = [("alloc", 7, 40, "forward L0 mlp"), ("free", 7), ("alloc", 7, 80, "backward L1 mlp"),
              ("alloc", 8, 5, "backward L0"), ("name", 7, "gradients"), ("name", 9, "nothing"), ("free", 8)]
        r = mtr.analyse(ev)
        self.assertEqual(r["bytes"], 85)
        self.assertEqual(groups(r), {"gradients": 80, "backward L*": 5})

    def test_out_of_memory(self):
        r = mtr.analyse([("alloc", 1, 100, "a"), ("free", 1), ("alloc", 2, 60, "forward L1 mlp"),
                         ("oom", 500, "forward L1 mlp"), ("free", 2)])
        self.assertEqual((r["at"], r["bytes"], r["failed_request_bytes"]), ("out of memory", 60, 500))
        self.assertIn("failed", mtr.table(r, "t"))

    def test_folding_and_size_classes(self):
        self.assertEqual(mtr.fold_layers("recompute L12 attention"), "recompute L* attention")
        self.assertEqual(mtr.fold_layers("Liger L2x"), "Liger L*x")
        self.assertEqual(mtr.size_class(2048), "< 1 MiB")
        self.assertEqual(mtr.size_class(2 << 30), ">= 1 GiB")

    def test_side_by_side_has_every_group(self):
        a = mtr.analyse([("alloc", 1, 1 << 30, "before the step"), ("name", 1, "weights"),
                         ("alloc", 2, 1 << 20, "forward L0 mlp")])
        b = mtr.analyse([("alloc", 1, 1 << 30, "before the step"), ("name", 1, "weights"),
                         ("alloc", 2, 1 << 21, "forward L0 attention")])
        a.update(side="fptrain", step=3)
        b.update(side="transformers", step=3)
        md = mtr.side_by_side(a, b)
        for g in ("| weights | 1.000 | 1.000 | 0.000 |", "forward L* mlp", "forward L* attention", "fptrain, step 3"):
            self.assertIn(g, md)


class PeerLabels(unittest.TestCase):
    def test_hooks_label_forward_backward_and_recomputation(self):
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
        torch.manual_seed(0)
        cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                          num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64)
        model = LlamaForCausalLM(cfg)
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.train()
        seen = []
        trace = mtr.PeerMemoryTrace(model, "/nonexistent", step=1)
        trace.labels._apply = lambda: seen.append(f"{trace.labels.stage} {trace.labels.op}".strip())
        trace.recording = True  # begin() needs CUDA: its labels alone here
        trace.forward()
        ids = torch.randint(0, 64, (1, 12))
        loss = model(input_ids=ids, labels=ids).loss
        trace.label_loss(loss)
        loss.backward()
        for tag in ("forward embedding", "forward L0 attention", "forward L1 mlp", "forward L1 norm",
                    "forward head/loss", "backward head/loss", "backward L1", "backward L1 mlp",
                    "backward L1 attention", "recompute L1 attention", "backward L0 mlp", "backward embedding"):
            self.assertIn(tag, seen)
        self.assertLess(seen.index("backward L1 mlp"), seen.index("backward L0"))


if __name__ == "__main__":
    unittest.main()
