// at::parallel_for for the CPU optimizer loops, with a build check: ATen's parallel_for
// is an inline template that spreads work over threads only in code compiled with
// OpenMP (INTRA_OP_PARALLEL); otherwise every loop runs on one thread whatever
// at::set_num_threads says. CMakeLists.txt compiles every LibTorch user with it.
#pragma once

#include <ATen/Parallel.h>

#ifndef INTRA_OP_PARALLEL
#error "fptrain: compile with OpenMP (CMakeLists.txt, fptrain_torch): at::parallel_for would run on one thread"
#endif
