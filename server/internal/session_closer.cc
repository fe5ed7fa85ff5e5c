#include "server/internal/session_closer.h"

#include "absl/status/status.h"
#include "base/log.h"

namespace regcache::server::internal {

SessionCloser::SessionCloser(service::Daemon* daemon, int workers) : daemon_(daemon) {
  for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { Work(); });
}

SessionCloser::~SessionCloser() {
  Drain();
  {
    base::MutexLock l(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  for (std::thread& t : threads_) t.join();
}

void SessionCloser::Close(service::SessionId session, std::string why) {
  {
    base::MutexLock l(&mu_);
    queue_.emplace_back(session, std::move(why));
  }
  cv_.SignalAll();
}

void SessionCloser::Drain() {
  base::MutexLock l(&mu_);
  while (!queue_.empty() || running_ != 0) cv_.Wait(&mu_);
}

void SessionCloser::Work() {
  mu_.Lock();
  while (true) {
    while (!stop_ && queue_.empty()) cv_.Wait(&mu_);
    if (queue_.empty()) break;  // stopping, nothing left
    auto [session, why] = std::move(queue_.front());
    queue_.pop_front();
    ++running_;
    mu_.Unlock();
    absl::Status closed = daemon_->CloseSession(session);
    if (!closed.ok() && closed.code() != absl::StatusCode::kNotFound) {
      RC_LOG(WARNING) << "control: closing session " << session << ": " << closed;
    }
    RC_LOG(INFO) << "control: session " << session << " closed (" << why << ")";
    mu_.Lock();
    --running_;
    cv_.SignalAll();  // Drain
  }
  mu_.Unlock();
}

}  // namespace regcache::server::internal
