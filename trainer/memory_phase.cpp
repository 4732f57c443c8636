#include "trainer/memory_phase.h"

#include <utility>

namespace fptrain::trainer::memory_phase {
namespace {

// Each thread its own: the forward runs on the caller's thread, autograd's backward
// on its device threads, and each sets its own labels.
thread_local std::string t_stage;
thread_local std::string t_op;

}  // namespace

const std::string& stage() { return t_stage; }
const std::string& op() { return t_op; }

void set_stage(std::string s) {
  t_stage = std::move(s);
  t_op.clear();
}

void set_op(std::string o) { t_op = std::move(o); }

std::string tag() {
  if (t_stage.empty()) return t_op.empty() ? "other" : t_op;
  return t_op.empty() ? t_stage : t_stage + " " + t_op;
}

bool in_backward() { return t_stage.rfind("backward", 0) == 0; }

StageScope::StageScope(std::string s) : stage_(t_stage), op_(t_op) { set_stage(std::move(s)); }

StageScope::~StageScope() {
  t_stage = std::move(stage_);
  t_op = std::move(op_);
}

OpScope::OpScope(const char* o) : op_(t_op) { t_op = o; }

OpScope::~OpScope() { t_op = std::move(op_); }

}  // namespace fptrain::trainer::memory_phase
