#include "data/micro_batch_plan.h"

#include <algorithm>

#include "data/batch_planner.h"

namespace fptrain::data {
namespace {

PlannedMicroBatch whole_examples(const std::vector<PlanItem>& items, std::vector<size_t> picked, bool pad) {
  PlannedMicroBatch mb;
  int64_t longest = 0, sum = 0;
  for (size_t i : picked) {
    longest = std::max(longest, items[i].length);
    sum += items[i].length;
    mb.supervised += items[i].supervised;
  }
  mb.tokens = pad ? longest * static_cast<int64_t>(picked.size()) : sum;
  mb.padding = mb.tokens - sum;
  mb.started = static_cast<int64_t>(picked.size());
  mb.items = std::move(picked);
  return mb;
}

// Flatten balanced across ranks: the step's examples dealt by cost, world x k
// micro-batches, the empty ones kept so that every rank's share is visible.
std::vector<PlannedMicroBatch> deal_step(const std::vector<PlanItem>& items, const DataOptions& o) {
  std::vector<int64_t> lengths;
  for (const PlanItem& it : items) lengths.push_back(it.length);
  std::vector<PlannedMicroBatch> out;
  for (DealtMicroBatch& dealt :
       deal_to_ranks(lengths, o.world_size, o.examples_per_micro_batch, o.balance_attention_length)) {
    out.push_back(whole_examples(items, std::move(dealt.examples), /*pad=*/false));
    out.back().rank = dealt.rank;
  }
  return out;
}

std::vector<PlannedMicroBatch> pack_window(const std::vector<PlanItem>& items, const DataOptions& o, int64_t epoch,
                                           int64_t window_start) {
  std::vector<int64_t> lengths;
  for (const PlanItem& it : items) lengths.push_back(it.length);
  std::vector<PlannedMicroBatch> out;
  for (auto& bin : plan_pack_window(lengths, o.max_tokens, o.seed, epoch, window_start))
    out.push_back(whole_examples(items, std::move(bin), /*pad=*/false));
  return out;
}

// Fixed mode: the window's examples, in stream order, concatenated and cut
// into rows of row_tokens, rows_per_micro_batch of them a micro-batch; only
// the window's last row and micro-batch may be shorter.
std::vector<PlannedMicroBatch> cut_rows(const std::vector<PlanItem>& items, const DataOptions& o) {
  std::vector<PlannedMicroBatch> out;
  PlannedMicroBatch mb;
  std::vector<PlannedPiece> row;
  int64_t room = o.row_tokens;
  auto close_row = [&] {
    if (!row.empty()) mb.rows.push_back(std::move(row));
    row.clear();
    room = o.row_tokens;
    if (static_cast<int64_t>(mb.rows.size()) == o.rows_per_micro_batch) {
      out.push_back(std::move(mb));
      mb = PlannedMicroBatch{};
    }
  };
  for (size_t i = 0; i < items.size(); ++i)
    for (int64_t at = 0; at < items[i].length;) {
      const int64_t take = std::min(room, items[i].length - at);
      row.push_back({i, at, at + take});
      if (mb.items.empty() || mb.items.back() != i) mb.items.push_back(i);
      mb.tokens += take;
      mb.supervised += items[i].supervised * take / items[i].length;
      mb.started += at == 0;
      at += take;
      room -= take;
      if (room == 0) close_row();
    }
  close_row();
  if (!mb.rows.empty()) out.push_back(std::move(mb));
  return out;
}

}  // namespace

PlanGroup plan_group(const DataOptions& o) {
  switch (o.batching) {
    case BatchMode::kPack:
    case BatchMode::kFixed:
      return {true, o.shuffle_window};
    case BatchMode::kFlatten:
      if (o.world_size > 1 && o.balance_ranks)
        return {false, o.examples_per_micro_batch * o.world_size * o.micro_batches_per_step};
      return {false, o.examples_per_micro_batch};
    case BatchMode::kPad:
      return {false, o.examples_per_micro_batch};
  }
  return {};
}

std::vector<PlannedMicroBatch> plan_group_batches(const std::vector<PlanItem>& items, const DataOptions& o,
                                                  int64_t epoch, int64_t group_start) {
  if (items.empty()) return {};
  switch (o.batching) {
    case BatchMode::kPack:
      return pack_window(items, o, epoch, group_start);
    case BatchMode::kFixed:
      return cut_rows(items, o);
    case BatchMode::kFlatten:
      if (o.world_size > 1 && o.balance_ranks) return deal_step(items, o);
      break;
    case BatchMode::kPad:
      break;
  }
  std::vector<size_t> all(items.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  return {whole_examples(items, std::move(all), o.batching == BatchMode::kPad)};
}

}  // namespace fptrain::data
