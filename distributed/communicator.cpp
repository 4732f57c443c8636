#include "distributed/communicator.h"

namespace fptrain::distributed {

void Pending::wait() {
  if (work_) work_->wait();
  work_.reset();
}

}  // namespace fptrain::distributed
