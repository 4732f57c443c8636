#include "trainer/log/log.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <memory>
#include <mutex>

namespace fptrain::trainer::log {
namespace {

std::string pattern = "[%H:%M:%S] %^%l%$ %v";

void setup_once() {
  static std::once_flag once;
  std::call_once(once, [] { spdlog::set_pattern(pattern); });
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

void set_rank(int rank) {
  setup_once();
  pattern = "[%H:%M:%S] rank " + std::to_string(rank) + " %^%l%$ %v";
  spdlog::set_pattern(pattern);
  if (rank != 0 && spdlog::get_level() < spdlog::level::warn) spdlog::set_level(spdlog::level::warn);
}

void also_to_file(const std::string& path) {
  setup_once();
  auto console = std::make_shared<spdlog::sinks::stdout_color_sink_mt>();
  auto file = std::make_shared<spdlog::sinks::basic_file_sink_mt>(path, /*truncate=*/false);
  auto logger = std::make_shared<spdlog::logger>("fptrain", spdlog::sinks_init_list{console, file});
  logger->set_level(spdlog::get_level());
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
  spdlog::set_pattern(pattern);
}

}  // namespace fptrain::trainer::log
