#!/usr/bin/env python3
"""benchmarks/distributed/memory_model.py on the committed 2 x H100 logs of 2026-11-27:
1 -> 2 ranks within 5% of the measured peak, 2 -> 1 as close or a lower bound below it, the
fp32-master run at 1 GPU projected not to fit (it ran out of memory)."""
import os
import subprocess
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
DIST = os.path.join(HERE, "..", "..", "benchmarks", "distributed")
LOGS = os.path.join(DIST, "results", "logs_h100x2_2026-11-27")
sys.path.insert(0, DIST)
import memory_model as mm  # noqa: E402


def log(name, world=1):
    return mm.read(os.path.join(LOGS, name), world)


class MemoryModelTest(unittest.TestCase):
    def setUp(self):
        self.one = log("dist-fptrain-1gpu-bf16-adamw.log")
        self.ga2 = log("dist-fptrain-1gpu-ga2-bf16-adamw.log")
        self.two = log("dist-fptrain-2gpu-bf16-adamw.log", 2)
        self.two_fp32 = log("dist-fptrain-2gpu.log", 2)
        self.oom = log("dist-fptrain-1gpu.log")
        self.runs = [self.one, self.ga2, self.two, self.two_fp32, self.oom]

    def projected(self, src, n, k=None):
        a, s, _ = mm.sources(src, self.runs)
        return mm.project(dict(src, k=k or src["k"]), n, a, s)

    def test_phases_read_from_the_logs(self):
        self.assertEqual(mm.own_parts(self.one)[0], None)  # lazy, one micro-batch: the step's peak
        self.assertIsNotNone(mm.own_parts(self.ga2)[0])  # gradients held in the forward: the backward's
        self.assertTrue(self.two["copy_engines"])
        self.assertTrue(self.oom["oom"])

    def test_one_to_two_within_5_percent(self):
        real = mm.measured_peak(self.two)
        for src in (self.one, self.ga2):
            p, phase, lower = self.projected(src, 2)
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

    def test_cli_prints_the_tables(self):
        out = subprocess.run([sys.executable, os.path.join(DIST, "memory_model.py"),
                              *(os.path.join(LOGS, f) for f in ("dist-fptrain-1gpu-bf16-adamw.log",
                                                                "dist-fptrain-1gpu-ga2-bf16-adamw.log")),
                              os.path.join(LOGS, "dist-fptrain-2gpu-bf16-adamw.log") + ":2", "--project", "2", "8"],
                             check=True, capture_output=True, text=True).stdout
        p, phase, _ = self.projected(self.one, 2)
        row = (f"| dist-fptrain-1gpu-bf16-adamw.log | dist-fptrain-2gpu-bf16-adamw.log | 2 | {p / mm.GIB:.1f} ({phase}) | "
               f"{mm.measured_peak(self.two) / mm.GIB:.1f} |")
        self.assertIn(row, out)


if __name__ == "__main__":
    unittest.main()
