// What jinja2 decides when it compiles a parsed template: unknown filters and
// tests are errors, except inside if-statements and conditional expressions
// (there jinja2 defers the error to render time, when the branch runs); and
// whether each macro's body mentions caller / varargs / kwargs, which decides
// the arguments the macro accepts.
#pragma once

#include "jinja/ast.h"

namespace fptrain::jinja {

// Throws Error(kSyntax); fills MacroDef::uses_* in place.
void check_program(Program& program);

}  // namespace fptrain::jinja
