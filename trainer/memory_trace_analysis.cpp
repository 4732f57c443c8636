#include "trainer/memory_trace_analysis.h"

#include "common/byte_units.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <unordered_map>

namespace fptrain::trainer {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

// Replays events [0, end): the live blocks by address and the names given to
// blocks (by the index of their allocation) over the whole list.
struct Replay {
  std::unordered_map<uint64_t, LiveBlock> live;
  int64_t total = 0;
  int64_t unmatched_frees = 0;

  void apply(const TraceEvent& e, int64_t index) {
    if (e.kind == TraceEvent::Kind::kAlloc) {
      live[e.addr] = LiveBlock{e.addr, e.size, e.tag, "", index};
      total += e.size;
    } else if (e.kind == TraceEvent::Kind::kFree) {
      const auto it = live.find(e.addr);
      if (it == live.end()) {
        ++unmatched_frees;
        return;
      }
      total -= it->second.size;
      live.erase(it);
    }
  }
};

// Names apply to the block alive at the address when they are given, wherever it
// is alive later or earlier: keyed by its allocation.
std::unordered_map<int64_t, std::string> names_of_blocks(const std::vector<TraceEvent>& events) {
  std::unordered_map<int64_t, std::string> names;
  Replay r;
  for (size_t i = 0; i < events.size(); ++i) {
    const TraceEvent& e = events[i];
    if (e.kind == TraceEvent::Kind::kName) {
      const auto it = r.live.find(e.addr);
      if (it != r.live.end()) names[it->second.event] = e.tag;
    }
    r.apply(e, static_cast<int64_t>(i));
  }
  return names;
}

// The first kOom, else the allocation that first reaches the maximum total.
int64_t moment_of_interest(const std::vector<TraceEvent>& events, bool& oom) {
  Replay r;
  int64_t best = -1, peak = -1;
  for (size_t i = 0; i < events.size(); ++i) {
    if (events[i].kind == TraceEvent::Kind::kOom) {
      oom = true;
      return static_cast<int64_t>(i);
    }
    r.apply(events[i], static_cast<int64_t>(i));
    if (events[i].kind == TraceEvent::Kind::kAlloc && r.total > peak) {
      peak = r.total;
      best = static_cast<int64_t>(i);
    }
  }
  return best;
}

std::string gib(int64_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3f", common::gib(static_cast<double>(bytes)));
  return buf;
}

}  // namespace

std::string LiveBlock::group() const { return name.empty() ? fold_layers(tag) : name; }

std::string fold_layers(const std::string& tag) {
  std::string out;
  for (size_t i = 0; i < tag.size(); ++i) {
    const bool word_start = i == 0 || tag[i - 1] == ' ';
    if (word_start && tag[i] == 'L' && i + 1 < tag.size() && std::isdigit(static_cast<unsigned char>(tag[i + 1]))) {
      out += "L*";
      while (i + 1 < tag.size() && std::isdigit(static_cast<unsigned char>(tag[i + 1]))) ++i;
      continue;
    }
    out += tag[i];
  }
  return out;
}

std::string size_class(int64_t bytes) {
  if (bytes < kMiB) return "< 1 MiB";
  if (bytes < 16 * kMiB) return "1-16 MiB";
  if (bytes < 128 * kMiB) return "16-128 MiB";
  if (bytes < 1024 * kMiB) return "128 MiB-1 GiB";
  return ">= 1 GiB";
}

// Bytes allocated per folded tag over all events.
std::vector<GroupBytes> allocated_by_group(const std::vector<TraceEvent>& events) {
  std::vector<LiveBlock> all;
  for (const TraceEvent& e : events)
    if (e.kind == TraceEvent::Kind::kAlloc) all.push_back(LiveBlock{e.addr, e.size, e.tag, "", 0});
  return group_live(all, GroupKey::kGroup);
}

TraceAnalysis analyse_trace(const std::vector<TraceEvent>& events) {
  TraceAnalysis a;
  a.allocated = allocated_by_group(events);
  a.event = moment_of_interest(events, a.out_of_memory);
  if (a.event < 0) return a;
  const std::unordered_map<int64_t, std::string> names = names_of_blocks(events);
  Replay r;
  // The peak includes its own allocation; an OOM's moment is just before its failure.
  const int64_t end = a.out_of_memory ? a.event : a.event + 1;
  for (int64_t i = 0; i < end; ++i) r.apply(events[static_cast<size_t>(i)], i);
  const TraceEvent& at = events[static_cast<size_t>(a.event)];
  a.bytes = r.total;
  a.tag = at.tag;
  a.size = at.size;
  a.unmatched_frees = r.unmatched_frees;
  for (auto& [addr, block] : r.live) {
    const auto n = names.find(block.event);
    if (n != names.end()) block.name = n->second;
    a.live.push_back(std::move(block));
  }
  std::sort(a.live.begin(), a.live.end(), [](const LiveBlock& x, const LiveBlock& y) {
    return x.size != y.size ? x.size > y.size : x.event < y.event;
  });
  return a;
}

std::vector<GroupBytes> group_live(const std::vector<LiveBlock>& live, GroupKey key) {
  std::map<std::string, GroupBytes> groups;
  for (const LiveBlock& b : live) {
    const std::string k = key == GroupKey::kGroup ? b.group() : key == GroupKey::kTag ? b.tag : size_class(b.size);
    GroupBytes& g = groups[k];
    g.group = k;
    g.bytes += b.size;
    ++g.count;
  }
  std::vector<GroupBytes> out;
  for (auto& [k, g] : groups) out.push_back(g);
  std::sort(out.begin(), out.end(), [](const GroupBytes& x, const GroupBytes& y) {
    return x.bytes != y.bytes ? x.bytes > y.bytes : x.group < y.group;
  });
  return out;
}

nlohmann::ordered_json trace_json(const TraceAnalysis& a, size_t top) {
  auto groups = [&a](GroupKey key) {
    nlohmann::ordered_json out = nlohmann::ordered_json::array();
    for (const GroupBytes& g : group_live(a.live, key))
      out.push_back({{"group", g.group}, {"bytes", g.bytes}, {"count", g.count}});
    return out;
  };
  nlohmann::ordered_json j;
  j["at"] = a.out_of_memory ? "out of memory" : "peak";
  j["bytes"] = a.bytes;
  j["event"] = a.event;
  j["event_tag"] = a.tag;
  j[a.out_of_memory ? "failed_request_bytes" : "event_bytes"] = a.size;
  j["live_blocks"] = a.live.size();
  j["unmatched_frees"] = a.unmatched_frees;
  j["by_group"] = groups(GroupKey::kGroup);
  j["by_tag"] = groups(GroupKey::kTag);
  j["by_size_class"] = groups(GroupKey::kSizeClass);
  j["allocated_in_step"] = nlohmann::ordered_json::array();
  for (const GroupBytes& g : a.allocated)
    j["allocated_in_step"].push_back({{"group", g.group}, {"bytes", g.bytes}, {"count", g.count}});
  j["top"] = nlohmann::ordered_json::array();
  for (size_t i = 0; i < a.live.size() && i < top; ++i)
    j["top"].push_back({{"bytes", a.live[i].size}, {"group", a.live[i].group()}, {"tag", a.live[i].tag}});
  // Every block under 16 MiB as well: sizes name the small buffers one side keeps and the
  // other does not (19,186 x 8 bytes: a [T] int64 batch tensor), which groups sum away.
  j["small_blocks"] = nlohmann::ordered_json::array();
  for (const LiveBlock& b : a.live)
    if (b.size < kSmallBlockBytes)
      j["small_blocks"].push_back({{"bytes", b.size}, {"group", b.group()}, {"tag", b.tag}});
  return j;
}

std::string trace_table(const TraceAnalysis& a, const std::string& title, size_t top) {
  std::string md = "## " + title + "\n\n";
  md += a.out_of_memory ? "Alive when an allocation of " + gib(a.size) + " GiB failed (" + a.tag + "): "
                        : "Alive at the peak, reached by an allocation of " + gib(a.size) + " GiB in " + a.tag + ": ";
  md += gib(a.bytes) + " GiB in " + std::to_string(a.live.size()) + " blocks.\n\n";
  md += "| group | GiB | blocks |\n| --- | ---: | ---: |\n";
  for (const GroupBytes& g : group_live(a.live, GroupKey::kGroup))
    md += "| " + g.group + " | " + gib(g.bytes) + " | " + std::to_string(g.count) + " |\n";
  md += "\n| size class | GiB | blocks |\n| --- | ---: | ---: |\n";
  for (const GroupBytes& g : group_live(a.live, GroupKey::kSizeClass))
    md += "| " + g.group + " | " + gib(g.bytes) + " | " + std::to_string(g.count) + " |\n";
  md += "\n| largest blocks | GiB | allocated in |\n| --- | ---: | --- |\n";
  for (size_t i = 0; i < a.live.size() && i < top; ++i)
    md += "| " + a.live[i].group() + " | " + gib(a.live[i].size) + " | " + a.live[i].tag + " |\n";
  return md;
}

}  // namespace fptrain::trainer
