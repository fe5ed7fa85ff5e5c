// Closes sessions off the control socket's thread. Closing a session waits for its calls in
// flight (a large attach can take seconds); the thread that accepts and answers every tenant's
// connections must never wait on one tenant's work. Up to `workers` closes run at once, the rest
// queue in order. Internal to server/.
//
// Thread safety: Close and Drain may be called from any thread.
#ifndef REGCACHE_SERVER_INTERNAL_SESSION_CLOSER_H_
#define REGCACHE_SERVER_INTERNAL_SESSION_CLOSER_H_

#include <deque>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "base/mutex.h"
#include "service/daemon.h"

namespace regcache::server::internal {

class SessionCloser {
 public:
  SessionCloser(service::Daemon* daemon, int workers);
  ~SessionCloser();  // finishes every queued close, then stops its threads
  SessionCloser(const SessionCloser&) = delete;
  SessionCloser& operator=(const SessionCloser&) = delete;

  // Queues the close of `session` (logged with `why`) and returns at once.
  void Close(service::SessionId session, std::string why) ABSL_LOCKS_EXCLUDED(mu_);
  // Waits until every close queued so far has finished.
  void Drain() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  void Work() ABSL_LOCKS_EXCLUDED(mu_);

  service::Daemon* const daemon_;
  base::Mutex mu_;
  base::CondVar cv_;
  std::deque<std::pair<service::SessionId, std::string>> queue_ ABSL_GUARDED_BY(mu_);
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace regcache::server::internal
#endif  // REGCACHE_SERVER_INTERNAL_SESSION_CLOSER_H_
