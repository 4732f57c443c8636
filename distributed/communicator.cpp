#include "distributed/communicator.h"

namespace fptrain::distributed {

void Pending::wait() {
  if (work_) work_->wait();
  if (wait_) wait_();
  work_.reset();
  wait_ = nullptr;
}

}  // namespace fptrain::distributed
