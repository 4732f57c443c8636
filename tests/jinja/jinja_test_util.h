// Shared helpers of the Jinja tests: the golden cases made by
// make_fixtures.py, a fixed clock, and readable dumps for failure messages.
#pragma once

#include <ctime>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "jinja/template.h"

namespace fptrain::jinja::testing {

inline const nlohmann::ordered_json& golden_cases() {
  static const nlohmann::ordered_json cases = [] {
    const std::string path = std::string(FPTRAIN_FIXTURE_DIR) + "/cases.json";
    std::ifstream in(path);
    if (!in) throw std::runtime_error("missing " + path + " (run the jinja.fixtures test first)");
    return nlohmann::ordered_json::parse(in);
  }();
  return cases;
}

// The date make_fixtures.py pins strftime_now to.
inline std::tm fixed_now() {
  const auto& n = golden_cases()["now"];
  std::tm tm{};
  tm.tm_year = n["year"];
  tm.tm_mon = n["mon"];
  tm.tm_mday = n["mday"];
  tm.tm_hour = n["hour"];
  tm.tm_min = n["min"];
  tm.tm_sec = n["sec"];
  tm.tm_wday = n["wday"];
  tm.tm_yday = n["yday"];
  tm.tm_isdst = -1;
  return tm;
}

// A fixed date for unit tests that need no golden file: 2024-07-26 13:45:09, a Friday.
inline std::tm fixed_now_for_unit_tests() {
  std::tm tm{};
  tm.tm_year = 124;
  tm.tm_mon = 6;
  tm.tm_mday = 26;
  tm.tm_hour = 13;
  tm.tm_min = 45;
  tm.tm_sec = 9;
  tm.tm_wday = 5;
  tm.tm_yday = 207;
  tm.tm_isdst = -1;
  return tm;
}

// A string with its control characters visible, for failure messages.
inline std::string visible(const std::string& s) { return nlohmann::json(s).dump(); }

// Render a template and return its text (for short unit tests).
inline std::string render_text(const std::string& source, const nlohmann::ordered_json& variables = nlohmann::ordered_json::object()) {
  Context ctx;
  ctx.variables = variables;
  return Template(source, "test").render(ctx).text;
}

}  // namespace fptrain::jinja::testing
