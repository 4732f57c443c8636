#include "distributed/group.h"

#include "distributed/store_communicator.h"
#include "distributed/store_errors.h"
#ifdef FPTRAIN_DISTRIBUTED_NCCL
#include "distributed/nccl_communicator.h"
#endif

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace fptrain::distributed {
namespace {

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }
constexpr int64_t kStopFlag = int64_t{1} << 20;  // stop votes: count + kStopFlag x wanting to stop

c10::intrusive_ptr<c10d::Store> open_store(const LaunchEnv& env, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions o;
  o.port = env.master_port;
  o.timeout = timeout;
  o.isServer = !env.use_agent_store && env.rank == 0;
  if (o.isServer) o.numWorkers = static_cast<size_t>(env.world_size);
  o.waitWorkers = false;  // Group::join's first barrier names the ranks that do not come
  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, o);
  } catch (const std::exception& e) {
    throw std::runtime_error("rank " + std::to_string(env.rank) + ": cannot " +
                             (o.isServer ? "host" : "reach") + " the store at " + env.master_addr + ":" +
                             std::to_string(env.master_port) + (o.isServer ? " (is the port in use?)" : "") + ": " +
                             first_line(e));
  }
  if (env.use_agent_store) store = c10::make_intrusive<c10d::PrefixStore>(env.store_prefix, store);
  return c10::make_intrusive<c10d::PrefixStore>("fptrain", store);
}

}  // namespace

Group::Group(LaunchEnv env, GroupOptions options) : env_(std::move(env)), options_(std::move(options)) {}

Group::~Group() {
  if (monitor_) monitor_->stop();
}

std::unique_ptr<Group> Group::join(const LaunchEnv& env, const GroupOptions& options) {
  std::unique_ptr<Group> g(new Group(env, options));
  if (!g->options_.fatal) g->options_.fatal = [](const std::string& m) { std::fprintf(stderr, "%s\n", m.c_str()); };
  g->store_ = open_store(env, options.timeout);
  // Heartbeat keys exist before anyone's monitor reads them: the monitor sets
  // its own, then everyone meets.
  g->monitor_ = std::make_unique<LivenessMonitor>(g->store_->clone(), env.rank, env.world_size,
                                                  std::min(options.timeout, options.heartbeat_timeout),
                                                  options.timeout, g->options_.fatal);
  g->barrier("join");
  if (options.nccl) {
#ifdef FPTRAIN_DISTRIBUTED_NCCL
    using T = NcclCommunicator::Transfers;
    const T transfers = options.transfers == "auto"          ? T::kAuto
                        : options.transfers == "copy_engine" ? T::kCopyEngine
                        : options.transfers == "nccl"        ? T::kNccl
                                                             : throw std::invalid_argument("unknown transfers: " + options.transfers);
    g->comm_ = std::make_unique<NcclCommunicator>(g->store_, env.rank, env.world_size, options.device_index,
                                                  options.timeout, transfers);
#else
    throw std::runtime_error("this build has no NCCL (configure with FPTRAIN_CUDA=ON)");
#endif
  } else {
    g->comm_ = std::make_unique<StoreCommunicator>(c10::make_intrusive<c10d::PrefixStore>("cpu", g->store_), env.rank,
                                                   env.world_size, options.timeout);
  }
  return g;
}

std::vector<uint8_t> Group::wait_get(const std::string& key, int from, const std::string& what) {
  try {
    store_->wait({key}, options_.timeout);
    return store_->get(key);
  } catch (const std::exception& e) {
    if (store_connection_lost(e)) throw;  // with_store says it
    throw std::runtime_error("rank " + std::to_string(rank()) + ": rank " + std::to_string(from) +
                             " did not arrive at " + what + " within " +
                             std::to_string(options_.timeout.count() / 1000) + " s (distributed.timeout): " +
                             first_line(e));
  }
}

std::vector<std::string> Group::all_gather_text(const std::string& name, const std::string& value) {
  const std::string base = "gather/" + name + "/";
  std::vector<std::string> out(world_size());
  with_store(rank(), "'" + name + "'", [&] {
    store_->set(base + std::to_string(rank()), bytes(value));
    for (int r = 0; r < world_size(); ++r) out[r] = text(wait_get(base + std::to_string(r), r, "'" + name + "'"));
  });
  // Clean-up only: the values are in hand, so a store that just went away (rank 0
  // failing on what it gathered) must not replace the caller's own verdict.
  try {
    if (store_->add(base + "read", 1) == world_size()) {
      for (int r = 0; r < world_size(); ++r) store_->deleteKey(base + std::to_string(r));
      store_->deleteKey(base + "read");
    }
  } catch (const std::exception&) {
  }
  return out;
}

void Group::barrier(const std::string& name) { all_gather_text("barrier/" + name, ""); }

void Group::check_same(const std::string& what, const std::string& value) {
  const auto all = all_gather_text("same/" + what, value);
  std::string differ;
  for (int r = 1; r < world_size(); ++r)
    if (all[r] != all[0]) differ += (differ.empty() ? "" : ", ") + std::to_string(r);
  if (!differ.empty())
    throw std::runtime_error("rank " + std::to_string(rank()) + ": the " + what + " of rank(s) " + differ +
                             " differs from rank 0's; every rank must run the same " + what);
}

namespace {

// An outcome as one store value: a tag byte, then the value or the message.
std::string encode(const Group::Outcome& o) { return (o.ok ? "+" : "-") + o.value; }
Group::Outcome decode(const std::string& s) {
  if (s.empty()) return {false, "(no outcome)"};
  return {s[0] == '+', s.substr(1)};
}

Group::Outcome run_caught(const std::function<std::string()>& work) {
  try {
    return {true, work()};
  } catch (const std::exception& e) {
    return {false, e.what()};
  }
}

}  // namespace

Group::Outcome Group::leader_decides(const std::string& name, const std::function<std::string()>& decide) {
  const std::string mine = rank() == 0 ? encode(run_caught(decide)) : std::string();
  return decode(all_gather_text("decide/" + name, mine).at(0));
}

std::vector<Group::Outcome> Group::each_reports(const std::string& name, const std::function<std::string()>& work) {
  std::vector<Outcome> out;
  for (const std::string& s : all_gather_text("report/" + name, encode(run_caught(work)))) out.push_back(decode(s));
  return out;
}

namespace {

template <typename T>
std::vector<std::vector<T>> gather_values(Group& g, const std::string& name, const std::vector<T>& mine) {
  const std::string packed(reinterpret_cast<const char*>(mine.data()), mine.size() * sizeof(T));
  std::vector<std::vector<T>> out;
  int r = 0;
  for (const std::string& s : g.all_gather_text(name, packed)) {
    if (s.size() != packed.size())
      throw std::runtime_error("rank " + std::to_string(r) + " sent " + std::to_string(s.size() / sizeof(T)) +
                               " values to '" + name + "', this rank " + std::to_string(mine.size()));
    out.emplace_back(mine.size());
    std::memcpy(out.back().data(), s.data(), s.size());
    ++r;
  }
  return out;
}

}  // namespace

std::vector<double> Group::sum_over_ranks(const std::vector<double>& mine) {
  std::vector<double> sum(mine.size(), 0.0);
  for (const auto& v : gather_values(*this, "sum/" + std::to_string(++reductions_), mine))
    for (size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
  return sum;
}

std::vector<int64_t> Group::max_over_ranks(const std::vector<int64_t>& mine) {
  std::vector<int64_t> top = mine;
  for (const auto& v : gather_values(*this, "max/" + std::to_string(++reductions_), mine))
    for (size_t i = 0; i < v.size(); ++i) top[i] = std::max(top[i], v[i]);
  return top;
}

bool Group::stop_vote(int64_t step, bool want_stop, int64_t first_step) {
  return with_store(rank(), "the stop vote of step " + std::to_string(step),
                    [&] { return stop_vote_unguarded(step, want_stop, first_step); });
}

bool Group::stop_vote_unguarded(int64_t step, bool want_stop, int64_t first_step) {
  store_->add("stop/" + std::to_string(step), want_stop ? 1 + kStopFlag : 1);
  if (step <= first_step) return false;  // nothing posted before this process's first step
  const std::string prev = "stop/" + std::to_string(step - 1);
  const auto deadline = std::chrono::steady_clock::now() + options_.timeout;
  auto pause = std::chrono::microseconds(200);
  for (;;) {
    const int64_t v = store_->add(prev, 0);
    if (v % kStopFlag == world_size()) {
      // Everyone has read step - 3's votes by now (each read them before posting step - 1).
      if (rank() == 0 && step - 3 >= first_step) store_->deleteKey("stop/" + std::to_string(step - 3));
      return v / kStopFlag > 0;
    }
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error("rank " + std::to_string(rank()) + ": only " + std::to_string(v % kStopFlag) + " of " +
                               std::to_string(world_size()) + " ranks finished step " + std::to_string(step - 1) +
                               " within " + std::to_string(options_.timeout.count() / 1000) +
                               " s (distributed.timeout)");
    std::this_thread::sleep_for(pause);
    pause = std::min(pause * 2, std::chrono::microseconds(20000));
  }
}

void Group::report_failure(const std::string& message) noexcept {
  try {
    if (!store_->check({kAbortKey})) store_->set(kAbortKey, bytes("rank " + std::to_string(rank()) + " failed: " + message));
    // The store lives in rank 0's process (launched by hand): stay a moment, so
    // that the others read why instead of finding the store gone.
    if (rank() == 0 && !env_.use_agent_store) std::this_thread::sleep_for(std::chrono::seconds(2));
  } catch (...) {
  }
}

void Group::finish() {
  if (finished_) return;
  finished_ = true;
  barrier("finish");
  monitor_->stop();
  with_store(rank(), "the end of the run", [&] {
  if (rank() == 0) {
    // The store lives in this process: wait (briefly) until the others are done with it.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (store_->add("left", 0) < world_size() - 1 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  } else {
    store_->add("left", 1);
  }
  });
}

}  // namespace fptrain::distributed
