// Metrics records: the required keys, one device read per log line, a resumed
// run rewriting the records after its checkpoint, divergence stopping the run.
#include "trainer/metrics.h"

#include "tests/trainer/trainer_test_util.h"

#include <limits>

namespace fptrain::trainer {
namespace {

using namespace testing;

StepRecord record(int64_t step, double loss) {
  StepRecord r;
  r.step = step;
  r.loss = at::full({}, loss, at::kFloat);
  r.grad_norm = at::full({}, 0.5, at::kFloat);
  r.lr = 1e-3;
  r.examples = 4;
  r.tokens = 100;
  r.padding = 20;
  r.supervised = 30;
  r.step_seconds = 0.5;
  r.data_wait_seconds = 0.1;
  return r;
}

TEST(TrainMetrics, RecordsHoldTheRequiredKeys) {
  TempDir dir;
  DeviceInfo dev;
  dev.name = "test";
  dev.peak_bf16_flops = 1e12;
  {
    MetricsLogger m(dir.path(), 4, 1000, dev, 0);
    for (int64_t s = 1; s <= 4; ++s) m.record(record(s, 2.0 + s), /*log_interval=*/2);
    const auto summary = m.summary();
    EXPECT_EQ(summary["steps"].get<int64_t>(), 4);
    EXPECT_EQ(summary["tokens"].get<int64_t>(), 4 * 80);
  }
  const auto recs = train_records(dir.path());
  ASSERT_EQ(recs.size(), 2u);
  for (const char* key : {"step", "loss", "lr", "grad_norm", "tokens_per_s", "supervised_tokens_per_s",
                          "padding_fraction", "mfu", "step_time_s", "data_wait_s", "peak_rss_bytes"})
    EXPECT_TRUE(recs[0].contains(key)) << key;
  EXPECT_DOUBLE_EQ(recs[0]["loss"].get<double>(), 3.5);  // mean of steps 1 and 2
  EXPECT_DOUBLE_EQ(recs[1]["loss"].get<double>(), 5.5);
  EXPECT_DOUBLE_EQ(recs[0]["tokens_per_s"].get<double>(), 80.0 / 0.5);  // non-padding tokens
  EXPECT_DOUBLE_EQ(recs[0]["padding_fraction"].get<double>(), 0.2);
  EXPECT_DOUBLE_EQ(recs[0]["mfu"].get<double>(), 6.0 * 1000 * 160 / 1e12);
}

TEST(TrainMetrics, ResumeKeepsRecordsUpToTheCheckpoint) {
  TempDir dir;
  DeviceInfo dev;
  {
    MetricsLogger m(dir.path(), 6, 10, dev, 0);
    for (int64_t s = 1; s <= 5; ++s) m.record(record(s, 1.0), 1);
  }
  {
    MetricsLogger m(dir.path(), 6, 10, dev, /*resume_step=*/3);
    m.record(record(4, 2.0), 1);
  }
  const auto recs = train_records(dir.path());
  ASSERT_EQ(recs.size(), 4u);
  EXPECT_EQ(recs[3]["step"].get<int64_t>(), 4);
  EXPECT_DOUBLE_EQ(recs[3]["loss"].get<double>(), 2.0);
}

TEST(TrainMetrics, NonFiniteLossStopsTheRun) {
  TempDir dir;
  MetricsLogger m(dir.path(), 3, 10, DeviceInfo{}, 0);
  EXPECT_THROW(m.record(record(1, std::numeric_limits<double>::quiet_NaN()), 1), std::runtime_error);
}

}  // namespace
}  // namespace fptrain::trainer
