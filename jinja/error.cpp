#include "jinja/error.h"

namespace fptrain::jinja {

Error::Error(Kind kind, std::string message)
    : kind_(kind), message_(std::move(message)), what_(message_) {}

void Error::locate(const std::string& template_name, int line) {
  if (located_) return;
  located_ = true;
  template_name_ = template_name;
  line_ = line > 0 ? line : 0;
  what_ = "template '" + template_name_ + "'" + (line_ > 0 ? " line " + std::to_string(line_) : "") + ": " + message_;
}

}  // namespace fptrain::jinja
