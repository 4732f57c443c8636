// AdamW's checkpoint state: the pieces of the buffers this rank holds, keyed by
// parameter (optim/adamw.h, state()), and their restoration from any sharding and
// either form of the moments (load_state()).
#include "optim/adamw.h"

#include "optim/blockwise8.h"

#include <c10/core/GradMode.h>

#include <stdexcept>
#include <unordered_map>

namespace fptrain::optim {
namespace {

using blockwise8::kBlock;

std::string describe(const at::Tensor& t) {
  std::string s = std::string(c10::toString(t.scalar_type())) + "[";
  for (int64_t i = 0; i < t.dim(); ++i) s += (i ? ", " : "") + std::to_string(t.size(i));
  return s + "]";
}

int64_t blocks_of(int64_t numel) { return (numel + kBlock - 1) / kBlock; }

bool is_absmax_kind(const std::string& key) {
  return key.rfind("exp_avg_absmax.", 0) == 0 || key.rfind("exp_avg_sq_absmax.", 0) == 0;
}

}  // namespace

// The saved pieces: "<kind>.<name>" -> (first element, or first block for absmax; flattened tensor).
struct AdamW::SavedIndex {
  struct Piece {
    int64_t first;
    at::Tensor flat;
  };
  std::unordered_map<std::string, std::vector<Piece>> pieces;
  size_t count = 0;
  std::string source;

  SavedIndex(const std::vector<std::pair<std::string, at::Tensor>>& tensors, std::string src)
      : count(tensors.size()), source(std::move(src)) {
    for (const auto& [key, t] : tensors) {
      const size_t at = key.rfind('@');
      int64_t first = 0;
      std::string base = key;
      if (at != std::string::npos && at + 1 < key.size() &&
          key.find_first_not_of("0123456789", at + 1) == std::string::npos) {
        first = std::stoll(key.substr(at + 1));
        base = key.substr(0, at);
      }
      if (is_absmax_kind(base)) {  // keyed by element; blocks start at parameter element first / kBlock
        if (first % kBlock != 0)
          throw std::runtime_error(source + ": tensor 'optimizer." + key + "' does not start on a block of " +
                                   std::to_string(kBlock) + " elements");
        first /= kBlock;
      }
      pieces[base].push_back({first, t.reshape({-1})});
    }
  }

  bool has(const std::string& key) const { return pieces.count(key) > 0; }
  at::ScalarType dtype(const std::string& key) const { return pieces.at(key).front().flat.scalar_type(); }

  // Copies elements [first, first + dst.numel()) of `key`, a tensor of `total` elements, into dst.
  void restore(const std::string& key, int64_t total, int64_t first, const at::Tensor& dst) const {
    const int64_t n = dst.numel();
    auto it = pieces.find(key);
    if (it == pieces.end())
      throw std::runtime_error(source + ": missing tensor 'optimizer." + key + "' (" + std::to_string(count) +
                               " optimizer tensors present): the checkpoint is incomplete or was written for "
                               "another model");
    int64_t covered = 0;
    for (const Piece& p : it->second) {
      if (p.flat.scalar_type() != dst.scalar_type() || p.first < 0 || p.first + p.flat.numel() > total)
        throw std::runtime_error(source + ": tensor 'optimizer." + key + "' does not match the model's parameter (" +
                                 describe(p.flat) + " at element " + std::to_string(p.first) + " vs " +
                                 std::string(c10::toString(dst.scalar_type())) + "[" + std::to_string(total) +
                                 "]): the checkpoint was written for another model or configuration");
      const int64_t lo = std::max(first, p.first), hi = std::min(first + n, p.first + p.flat.numel());
      if (lo >= hi) continue;
      dst.narrow(0, lo - first, hi - lo).copy_(p.flat.narrow(0, lo - p.first, hi - lo));
      covered += hi - lo;
    }
    if (covered != n)
      throw std::runtime_error(source + ": the optimizer state of '" + key + "' covers " + std::to_string(covered) +
                               " of the " + std::to_string(n) + " elements this rank needs: shard files are missing");
  }
};

std::vector<ShardPiece> AdamW::held_pieces() const {
  const FlatLayout& l = flat_->layout();
  if (dp_.shard) return l.shard_pieces(dp_.comm->rank());
  std::vector<ShardPiece> all;  // whole parameters, empty ones included
  for (size_t i = 0; i < l.segments().size(); ++i) {
    const FlatSegment& s = l.segments()[i];
    all.push_back({i, 0, s.offset, s.numel, s.offset});
  }
  return all;
}

std::vector<std::pair<std::string, at::Tensor>> AdamW::state() const {
  if (offloaded() && offload_waited_ < ranges_.size())  // the host state may still be updated
    throw std::logic_error("AdamW::state(): call wait_for_all_weights() after an offloaded step");
  if (streamed_) streamed_->sync_host();  // the last pieces' state may still be on its way back
  std::vector<std::pair<std::string, at::Tensor>> out;
  const FlatLayout& l = flat_->layout();
  for (const ShardPiece& p : held_pieces()) {
    const FlatSegment& s = l.segments()[p.segment];
    const bool whole = p.segment_offset == 0 && p.numel == s.numel;
    const std::string key = names_[p.segment] + (whole ? "" : "@" + std::to_string(p.segment_offset));
    auto piece = [&](const at::Tensor& t, int64_t at) {
      const at::Tensor v = t.narrow(0, at, p.numel);
      return whole ? v.view(s.shape) : v;
    };
    // Split masters are saved as the fp32 masters they are (a new tensor, on the CPU); without
    // master weights the weights are the model's, at their flat place.
    at::Tensor weight = split_masters() ? flat::join_masters(flat_->weights().narrow(0, p.flat_offset, p.numel).cpu(),
                                                             master_.narrow(0, p.local_offset, p.numel).cpu())
                        : master_weights_ ? master_.narrow(0, p.local_offset, p.numel)
                                          : flat_->weights().narrow(0, p.flat_offset, p.numel);
    out.emplace_back("weight." + key, whole ? weight.view(s.shape) : weight);
    if (moments_8bit()) {
      const int64_t b0 = p.local_offset / kBlock, nb = blocks_of(p.numel);
      out.emplace_back("exp_avg_codes." + key, piece(exp_avg_, p.local_offset));
      out.emplace_back("exp_avg_absmax." + key, exp_avg_absmax_.narrow(0, b0, nb));
      out.emplace_back("exp_avg_sq_codes." + key, piece(exp_avg_sq_, p.local_offset));
      out.emplace_back("exp_avg_sq_absmax." + key, exp_avg_sq_absmax_.narrow(0, b0, nb));
    } else {
      out.emplace_back("exp_avg." + key, piece(exp_avg_, p.local_offset));
      out.emplace_back("exp_avg_sq." + key, piece(exp_avg_sq_, p.local_offset));
    }
  }
  return out;
}

// One moment of one piece, from the saved form of either kind: 8-bit codes and absmax
// as saved, or full values quantised as the step stores them; for full moments, the
// saved values or the 8-bit ones dequantised.
void AdamW::restore_moments(const SavedIndex& saved, const ShardPiece& p) {
  const std::string& name = names_[p.segment];
  const int64_t total = flat_->layout().segments()[p.segment].numel;
  for (const bool first_moment : {true, false}) {
    const std::string kind = first_moment ? "exp_avg" : "exp_avg_sq";
    const std::string full = kind + "." + name, codes_key = kind + "_codes." + name, absmax_key = kind + "_absmax." + name;
    const at::Tensor dst = (first_moment ? exp_avg_ : exp_avg_sq_).narrow(0, p.local_offset, p.numel);
    if (moments_8bit()) {  // the piece starts on a block (the layout's alignment)
      const at::Tensor absmax =
          (first_moment ? exp_avg_absmax_ : exp_avg_sq_absmax_).narrow(0, p.local_offset / kBlock, blocks_of(p.numel));
      if (saved.has(codes_key) || !saved.has(full)) {
        saved.restore(codes_key, total, p.segment_offset, dst);
        saved.restore(absmax_key, blocks_of(total), p.segment_offset / kBlock, absmax);
      } else {
        const at::Tensor values = at::empty({p.numel}, at::TensorOptions().dtype(saved.dtype(full)));
        saved.restore(full, total, p.segment_offset, values);
        const auto [codes, block_max] = blockwise8::quantize(values.to(at::kFloat), first_moment);
        dst.copy_(codes);
        absmax.copy_(block_max);
      }
    } else if (saved.has(full) || !saved.has(codes_key)) {
      saved.restore(full, total, p.segment_offset, dst);
    } else {
      const int64_t b0 = p.segment_offset / kBlock, b1 = blocks_of(p.segment_offset + p.numel);
      const at::Tensor codes = at::empty({p.numel}, at::TensorOptions().dtype(at::kByte));
      const at::Tensor absmax = at::empty({b1 - b0}, at::TensorOptions().dtype(at::kFloat));
      saved.restore(codes_key, total, p.segment_offset, codes);
      saved.restore(absmax_key, blocks_of(total), b0, absmax);
      dst.copy_(blockwise8::dequantize(codes, absmax, first_moment, p.segment_offset - b0 * kBlock));
    }
  }
}

void AdamW::load_state(const std::vector<std::pair<std::string, at::Tensor>>& tensors, int64_t steps_taken,
                       const std::string& source) {
  const SavedIndex saved(tensors, source);
  c10::NoGradGuard no_grad;
  if (offloaded()) wait_for_all_weights();
  if (streamed_) streamed_->sync_host();  // no copy reads or writes the host state while it is restored
  const FlatLayout& l = flat_->layout();
  if (moments_8bit()) {
    // Padding, which no piece covers, as a step leaves it: the codes of zero (absmax 0 means 0 too).
    const blockwise8::CodeBooks& books = blockwise8::code_books();
    exp_avg_.fill_(static_cast<int64_t>(blockwise8::quantize_signed(books.exp_avg, 0.0f, 1.0f)));
    exp_avg_sq_.fill_(static_cast<int64_t>(blockwise8::quantize_unsigned(books.exp_avg_sq, 0.0f, 1.0f)));
    exp_avg_absmax_.zero_();
    exp_avg_sq_absmax_.zero_();
  }
  for (const ShardPiece& p : held_pieces()) {
    const FlatSegment& s = l.segments()[p.segment];
    if (p.numel == 0) continue;
    const std::string key = "weight." + names_[p.segment];
    if (split_masters()) {  // the saved fp32 masters, split into the model's weights and the remainders
      const at::Tensor m = at::empty({p.numel}, master_.options().dtype(at::kFloat));
      saved.restore(key, s.numel, p.segment_offset, m);
      flat::split_masters(m, flat_->weights().narrow(0, p.flat_offset, p.numel),
                          master_.narrow(0, p.local_offset, p.numel));
    } else {
      saved.restore(key, s.numel, p.segment_offset,
                    master_weights_ ? master_.narrow(0, p.local_offset, p.numel)
                                    : flat_->weights().narrow(0, p.flat_offset, p.numel));
    }
    restore_moments(saved, p);
  }
  // The model: the masters, rounded (every rank's slices, then gathered).
  if (master_weights_) {
    if (!split_masters())
      for (const Range& r : ranges_)
        flat::copy_masters_to_model(master_.narrow(0, r.local, r.numel), flat_->weights().narrow(0, r.flat, r.numel));
    if (dp_.shard) {
      std::vector<size_t> all;
      for (const Range& r : ranges_) all.push_back(r.bucket);
      all_gather_weights(all);
    }
  }
  if (offload_) offload_->mark_weights_stale();  // the model's weights changed under the host copy
  steps_taken_ = steps_taken;
}

}  // namespace fptrain::optim
