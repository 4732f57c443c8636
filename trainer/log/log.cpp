#include "trainer/log/log.h"

#include <spdlog/spdlog.h>

namespace fptrain::trainer::log {
namespace {

void setup_once() {
  static const bool done = [] {
    spdlog::set_pattern("[%H:%M:%S] %^%l%$ %v");
    return true;
  }();
  (void)done;
}

}  // namespace

void info(const std::string& message) {
  setup_once();
  spdlog::info("{}", message);
}
void warn(const std::string& message) {
  setup_once();
  spdlog::warn("{}", message);
}
void error(const std::string& message) {
  setup_once();
  spdlog::error("{}", message);
}
void debug(const std::string& message) {
  setup_once();
  spdlog::debug("{}", message);
}
void set_verbose(bool verbose) { spdlog::set_level(verbose ? spdlog::level::debug : spdlog::level::info); }

}  // namespace fptrain::trainer::log
