#!/usr/bin/env python3
"""benchmarks/distributed/memory_model.py on the committed 2 x H100 logs of 2026-11-27:
1 -> 2 ranks within 5% of the measured peak, 2 -> 1 as close or a lower bound below it, the
fp32-master run at 1 GPU projected not to fit (it ran out of memory). Those 2-rank runs pulled
resident gradients by copy engines; logs written here with the lines of today's runs check the
default that replaced it (lazy gradients pushed into receive windows, released to 1/N for the
step, held beside their shards until the reductions finish) and an explicitly resident run
(still the pull)."""
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
DIST = os.path.join(HERE, "..", "..", "benchmarks", "distributed")
LOGS = os.path.join(DIST, "results", "logs_h100x2_2026-11-27")
sys.path.insert(0, DIST)
import memory_model as mm  # noqa: E402

MIB, GIB = mm.MIB, mm.GIB
WHOLE = 12.55 * GIB  # the Llama-2-7B shape's bf16 gradients, as the committed logs read


def log(name, world=1):
    return mm.read(os.path.join(LOGS, name), world)


def log_text(world, k=1, storage="lazy", pushed=True, held=WHOLE, activations=3 * GIB, vocab=32000):
    """Rank 0's lines that memory_model.py reads, as a run of today's code writes them."""
    transfers = "nccl; reduce-scatters and all-gathers of shared buffers by copy engines"
    if pushed:
        transfers += "; reduce-scatters of step-by-step buffers pushed by copy engines"
    why = ("lazy (24 bucket(s) of up to 512 MiB, each allocated when the backward first reaches it and freed "
           "after the step)" if storage == "lazy" else
           "resident (one buffer of 12.55 GiB for the run: optimizer.gradient_storage is resident)")
    release = (f"gradients after the reductions: each rank holds {held / MIB:.1f} MiB of the 12.55 GiB gradients "
               f"(distributed.release_unowned_gradients: true, gradient storage {storage})")
    return "\n".join([
        f"rank 0 info model m: LlamaForCausalLM, 6.74B parameters, 32 layers, hidden 4096, vocab {vocab}",
        f"rank 0 info batching flatten | 4 examples per micro-batch x {k} micro-batches per step | 30 steps",
        f"rank 0 info tensor collectives: {transfers}",
        f"rank 0 info {release}",
        f"rank 0 info gradient storage: {why}",
        f"rank 0 info memory of this rank: 12.55 GiB weights, {held / MIB:.1f} MiB gradients, "
        f"{25.10 / world:.2f} GiB optimizer state, {activations / MIB:.1f} MiB activations and workspace at the peak, "
        "1.56 GiB outside the allocator (CUDA context, NCCL)",
        f"rank 0 info {release}",
    ]) + "\n"


class MemoryModelTest(unittest.TestCase):
    def setUp(self):
        self.one = log("dist-fptrain-1gpu-bf16-adamw.log")
        self.ga2 = log("dist-fptrain-1gpu-ga2-bf16-adamw.log")
        self.two = log("dist-fptrain-2gpu-bf16-adamw.log", 2)
        self.two_fp32 = log("dist-fptrain-2gpu.log", 2)
        self.oom = log("dist-fptrain-1gpu.log")
        self.runs = [self.one, self.ga2, self.two, self.two_fp32, self.oom]
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def written(self, name, world, **lines):
        path = os.path.join(self.tmp.name, name)
        with open(path, "w") as f:
            f.write(log_text(world, **lines))
        return mm.read(path, world)

    def projected(self, src, n, k=None, transfers="auto"):
        a, s, _ = mm.sources(src, self.runs)
        return mm.project(dict(src, k=k or src["k"]), n, a, s, transfers)

    def test_phases_read_from_the_logs(self):
        self.assertEqual(mm.own_parts(self.one)[0], None)  # lazy, one micro-batch: the step's peak
        self.assertIsNotNone(mm.own_parts(self.ga2)[0])  # gradients held in the forward: the backward's
        self.assertTrue(self.two["copy_engines"])
        self.assertEqual(self.two["transfers"], "pull")  # resident for the copy engines, before they pushed
        self.assertEqual(mm.transfers_at(self.two, 4, "auto"), "pull")
        self.assertTrue(self.oom["oom"])

    def test_one_to_two_within_5_percent(self):
        real = mm.measured_peak(self.two)
        for src in (self.one, self.ga2):
            p, phase, lower = self.projected(src, 2, transfers=self.two["transfers"])
            self.assertFalse(lower)
            self.assertEqual(phase, "backward")
            self.assertLess(abs(p - real) / real, 0.05, src["name"])

    def test_two_to_one(self):
        p, _, _ = self.projected(self.two, 1, k=2)
        real = mm.measured_peak(self.ga2)
        self.assertLess(abs(p - real) / real, 0.05)
        p, phase, lower = self.projected(self.two, 1)
        self.assertTrue(lower and phase == "step")  # the step's workspace is not in a 2-rank log
        self.assertLessEqual(p, mm.measured_peak(self.one))

    def test_fp32_masters_do_not_fit_one_gpu(self):
        p, _, _ = self.projected(self.two_fp32, 1)
        self.assertGreater(p, self.oom["device"])

    def test_default_pushes_lazy_gradients_and_releases_them(self):
        # One host, default settings: the copy engines push, so the gradients are lazy and 1/N at the step.
        for n in (2, 4, 8):
            self.assertEqual(mm.transfers_at(self.one, n, "auto"), "push")
        a, s, _ = mm.sources(self.one, self.runs)
        base = self.one["weights"] + self.one["optimizer"] / 2
        scale = (mm.bucket_bytes(2) / 2) / mm.bucket_bytes(1)  # the step's workspace per bucket piece
        found = dict((phase, p) for p, phase in mm.phases(self.one, 2, a, s))
        self.assertEqual(set(found), {"backward", "reductions", "step"})
        self.assertAlmostEqual(found["step"], base + WHOLE / 2 + s * scale)
        self.assertAlmostEqual(found["backward"], base + self.one["head"] + a)  # lazy: only the head's bucket
        # A pushed bucket goes once its push is queued: the shards and one bucket in flight.
        self.assertAlmostEqual(found["reductions"], base + WHOLE / 2 + mm.bucket_bytes(2))
        # Through NCCL every released bucket stays beside its shard until the reductions finish.
        nccl = dict((phase, p) for p, phase in mm.phases(self.one, 2, a, s, "nccl"))
        self.assertAlmostEqual(nccl["reductions"], base + WHOLE + WHOLE / 2)
        self.assertEqual(self.projected(self.one, 2, transfers="nccl"), (nccl["reductions"], "reductions", False))
        self.assertLess(self.projected(self.one, 2)[0], nccl["reductions"])
        pulled, phase, _ = self.projected(self.one, 2, transfers="pull")
        self.assertEqual(phase, "backward")
        self.assertAlmostEqual(pulled, base + mm.bucket_bytes(2) / 2 + WHOLE + a)
        # Without the release: no shards, the whole gradients to the step.
        kept = dict((phase, p) for p, phase in mm.phases(dict(self.one, release_setting=False), 2, a, s))
        self.assertEqual(set(kept), {"backward", "step"})
        self.assertAlmostEqual(kept["step"], base + WHOLE + s * scale)

    def test_pushed_adds_make_fp32_sums_above_two_ranks(self):
        for n in (4, 8):
            pushed, phase, _ = self.projected(self.ga2, n)
            nccl, nccl_phase, _ = self.projected(self.ga2, n, transfers="nccl")
            self.assertEqual((phase, nccl_phase), ("backward", "backward"))
            self.assertAlmostEqual(pushed - nccl, 2 * mm.bucket_bytes(n) * (n + 1) / n)
            pulled, _, _ = self.projected(self.ga2, n, transfers="pull")
            self.assertAlmostEqual(pulled - pushed, mm.bucket_bytes(n) * (n - 1) / n)  # the pull's kept scratch

    def test_receive_window_is_outside_the_allocator(self):
        for n, window in ((2, 512 * MIB), (4, 2 * 3 * 128 * MIB), (8, 2 * 7 * 64 * MIB)):
            self.assertEqual(mm.outside(self.one, n) - mm.outside(self.one, n, "nccl"), window)
            self.assertEqual(mm.outside(self.one, n, "pull"), mm.outside(self.one, n, "nccl"))
            self.assertEqual(mm.outside(self.two, n), mm.outside(self.two, n, "nccl"))  # it pulled: no window
        self.assertAlmostEqual(mm.outside(self.one, 2, "nccl") - mm.outside(self.one, 1),
                               mm.PEER + (8192 + 2) * 2 * 2 * 4, delta=1)  # a peer and the flags
        # A head larger than a bucket is one bucket's whole tensor: the window is sized by it.
        big = self.written("llama3.log", 2, vocab=128256)
        head = 4096 * 128256 * 2
        self.assertEqual(mm.window_bytes(big, 2), 2 * ((head // 2 + 255) // 256 * 256))
        self.assertEqual(mm.window_bytes(big, 8), 2 * 7 * ((-(-head // 8) + 255) // 256 * 256))

    def test_pushed_log(self):
        two = self.written("pushed-2gpu.log", 2, held=WHOLE / 2)
        self.assertEqual((two["transfers"], two["storage"], two["always_resident"]), ("push", "lazy", False))
        self.assertEqual(mm.transfers_at(two, 4, "auto"), "push")
        self.assertEqual(mm.transfers_at(two, 4, "nccl"), "nccl")
        self.assertEqual(mm.own_parts(two), (None, 3 * GIB))  # lazy, one micro-batch: the step's workspace
        # Several micro-batches: the forwards held every gradient, the figure counts the kept half only.
        ga2 = self.written("pushed-2gpu-ga2.log", 2, k=2, held=WHOLE / 2, activations=10 * GIB)
        a, s = mm.own_parts(ga2)
        self.assertIsNone(s)
        self.assertAlmostEqual(a, 10 * GIB - WHOLE / 2, delta=0.1 * MIB)
        # Compared with the projection of its own transfers: 1 -> 2 from the 1-GPU log, released.
        row = mm.pair_row(self.one, two, *mm.sources(self.one, self.runs)[:2], "auto")
        p, phase, _ = self.projected(self.one, 2)
        self.assertIn(f"| 2 | {p / GIB:.1f} ({phase}) |", row)

    def test_resident_requested_still_pulls(self):
        two = self.written("resident-2gpu.log", 2, storage="resident", pushed=False)
        self.assertEqual((two["transfers"], two["always_resident"]), ("pull", True))
        for n in (2, 4):
            self.assertEqual(mm.transfers_at(two, n, "auto"), "pull")
            self.assertEqual(mm.outside(two, n), mm.outside(two, n, "nccl"))
        a, s, _ = mm.sources(two, [two])
        self.assertAlmostEqual(a, 3 * GIB - mm.bucket_bytes(2) / 2, delta=0.1 * MIB)  # less the kept scratch
        p, phase, _ = mm.project(two, 4, a, s)
        scratch, sums = mm.copy_engine_bytes(4, "pull")
        self.assertEqual(phase, "backward")
        self.assertAlmostEqual(p, two["weights"] + two["optimizer"] / 2 + scratch + two["whole_gradients"] + a + sums)
        # Resident whatever the transfers: with NCCL the same, less the copy engines' buffers.
        self.assertAlmostEqual(mm.project(two, 4, a, s, "nccl")[0], p - scratch - sums)

    def test_cli_prints_the_tables(self):
        out = subprocess.run([sys.executable, os.path.join(DIST, "memory_model.py"),
                              *(os.path.join(LOGS, f) for f in ("dist-fptrain-1gpu-bf16-adamw.log",
                                                                "dist-fptrain-1gpu-ga2-bf16-adamw.log")),
                              os.path.join(LOGS, "dist-fptrain-2gpu-bf16-adamw.log") + ":2", "--project", "2", "8"],
                             check=True, capture_output=True, text=True).stdout
        p, phase, _ = self.projected(self.one, 2, transfers="pull")
        row = (f"| dist-fptrain-1gpu-bf16-adamw.log | dist-fptrain-2gpu-bf16-adamw.log | 2 | {p / GIB:.1f} ({phase}) | "
               f"{mm.measured_peak(self.two) / GIB:.1f} |")
        self.assertIn(row, out)
        window = f"| dist-fptrain-1gpu-bf16-adamw.log | 1 | 0.74 | {mm.outside(self.one, 2) / GIB:.2f} |"
        self.assertIn(window, out)


if __name__ == "__main__":
    unittest.main()
