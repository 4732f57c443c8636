// SIGINT / SIGTERM handling: the first signal asks the loop to stop after the
// current step (it then saves a checkpoint and exits 0); a second SIGINT
// restores the default action, so a stuck run can still be interrupted.
#pragma once

namespace fptrain::trainer {

void install_stop_handlers();
bool stop_requested();
int stop_signal_number();  // the signal that asked to stop, 0 if none

}  // namespace fptrain::trainer
