// The functions every template sees: jinja2's range, dict, namespace, cycler
// and joiner, and transformers' raise_exception and strftime_now.
#pragma once

#include "jinja/interpreter.h"

namespace fptrain::jinja {

void add_globals(Scope& scope);

}  // namespace fptrain::jinja
