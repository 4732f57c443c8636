#include "trainer/stop_signal.h"

#include <csignal>

namespace fptrain::trainer {
namespace {

volatile std::sig_atomic_t g_signal = 0;

extern "C" void on_stop_signal(int sig) {
  if (g_signal != 0 && sig == SIGINT) std::signal(SIGINT, SIG_DFL);  // second Ctrl-C: give up
  g_signal = sig;
}

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool stop_requested() { return g_signal != 0; }
int stop_signal_number() { return g_signal; }

}  // namespace fptrain::trainer
