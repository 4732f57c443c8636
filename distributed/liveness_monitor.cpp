#include "distributed/liveness_monitor.h"

#include "distributed/store_errors.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

namespace fptrain::distributed {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

}  // namespace

std::string heartbeat_key(int rank) { return "heartbeat/" + std::to_string(rank); }

LivenessMonitor::LivenessMonitor(c10::intrusive_ptr<c10d::Store> store, int rank, int world_size,
                                 std::chrono::milliseconds heartbeat_timeout, std::chrono::milliseconds timeout,
                                 std::function<void(const std::string&)> fatal, std::chrono::milliseconds period)
    : store_(std::move(store)), rank_(rank), world_(world_size), heartbeat_timeout_(heartbeat_timeout),
      timeout_(timeout), period_(period), fatal_(std::move(fatal)) {
  store_->set(heartbeat_key(rank_), bytes("0 0"));
  thread_ = std::thread([this] { run(); });
}

LivenessMonitor::~LivenessMonitor() { stop(); }

void LivenessMonitor::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void LivenessMonitor::lose(const std::string& message) {
  fatal_(message);
  try {
    if (!store_->check({kAbortKey})) store_->set(kAbortKey, bytes(message));
  } catch (...) {
  }
  std::_Exit(1);  // the main thread may be blocked in a collective that would wait for the lost rank
}

void LivenessMonitor::run() {
  const std::string me = "rank " + std::to_string(rank_);
  std::vector<std::string> keys;
  for (int r = 0; r < world_; ++r) keys.push_back(heartbeat_key(r));
  std::vector<std::string> last(world_);
  std::vector<Clock::time_point> changed(world_, Clock::now());
  Clock::time_point store_ok = Clock::now();
  int64_t beat = 0;
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, period_, [this] { return stopping_; })) {
    lock.unlock();
    const auto now = Clock::now();
    try {
      store_->set(heartbeat_key(rank_), bytes(std::to_string(++beat) + " " + std::to_string(step_.load())));
      if (store_->check({kAbortKey})) lose(me + ": stopping because " + text(store_->get(kAbortKey)));
      // Until every rank has joined, some keys are missing (multiGet would wait
      // for them); Group::join names a rank that never comes.
      if (!store_->check(keys)) {
        store_ok = now;
        lock.lock();
        continue;
      }
      const auto values = store_->multiGet(keys);
      for (int r = 0; r < world_; ++r) {
        if (r == rank_) continue;
        const std::string v = text(values[r]);
        if (v != last[r]) {
          last[r] = v;
          changed[r] = now;
        } else if (now - changed[r] > heartbeat_timeout_) {
          const auto space = v.find(' ');
          lose(me + ": lost rank " + std::to_string(r) + ": no heartbeat for " +
               std::to_string(std::chrono::duration_cast<std::chrono::seconds>(now - changed[r]).count()) +
               " s (a peer counts as lost after " + std::to_string(heartbeat_timeout_.count() / 1000) +
               " s: distributed.heartbeat_timeout, at most distributed.timeout; it was at step " +
               (space == std::string::npos ? std::string("?") : v.substr(space + 1)) +
               "): it died, froze or lost its network");
        }
      }
      store_ok = now;
    } catch (const std::exception& e) {
      // Rank 0 hosts the store (or torchrun's agent does): connection errors mean it is gone.
      if (now - store_ok > std::min<std::chrono::milliseconds>(timeout_, std::chrono::seconds(5)))
        lose(me + ": lost the store (hosted by rank 0 or torchrun's agent): " + first_line(e) +
             "; rank 0 or its machine is gone");
    }
    lock.lock();
  }
}

}  // namespace fptrain::distributed
