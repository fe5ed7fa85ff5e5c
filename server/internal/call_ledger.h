#ifndef REGCACHE_SERVER_INTERNAL_CALL_LEDGER_H_
#define REGCACHE_SERVER_INTERNAL_CALL_LEDGER_H_

// The holds that a session's recent gRPC calls made, by the id the client gave each call, so
// that a client which gave up on a call can have what the call made released (ForgetCalls).
//
// Why it exists: a gRPC server cannot know whether its reply reached the client. The daemon
// checks the deadline before it commits a key (and asks whether the client cancelled when
// little time is left), but the deadline it sees is the client's sent as a relative timeout,
// rounded to milliseconds and computed from clocks both sides cache; on a loaded host a call
// sent with no time left has been seen here with over 100 ms to go. A key made then is held
// for a client that already returned DEADLINE_EXCEEDED. The client knows which calls it gave up
// on, so it names them, and the daemon releases their holds, or, for a call it has not finished
// yet, remembers to release the hold the moment the call makes it.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "base/mutex.h"

namespace regcache::server::internal {

class CallLedger {
 public:
  // The most recent calls remembered per session (older ones are dropped first). A client names
  // the calls it gave up on right after giving up, long before this many others pass.
  static constexpr size_t kCallsPerSession = 256;
  // After this many recorded calls, entries of sessions no longer open are dropped.
  static constexpr size_t kPruneEvery = 4096;

  // Call `call_id` (non-zero) of session `session` made the hold `handle`. False when the
  // client forgot the call before it finished: the caller releases the hold and answers
  // CANCELLED instead of the key.
  bool Made(uint64_t session, uint64_t call_id, uint64_t handle);

  // The hold call `call_id` of `session` made, taken out of the ledger. nullopt when the call
  // made none, or has not made it yet: it is then marked forgotten, so its Made returns false.
  std::optional<uint64_t> Forget(uint64_t session, uint64_t call_id);

  // True every kPruneEvery recorded calls: the caller should call Prune.
  bool PruneDue();
  // Drops the entries of sessions for which `open` is false.
  void Prune(absl::FunctionRef<bool(uint64_t)> open);

  size_t sessions() const;

 private:
  struct Call {
    std::optional<uint64_t> handle;  // nullopt: forgotten before it made anything
  };
  struct Session {
    absl::flat_hash_map<uint64_t, Call> calls;
    std::deque<uint64_t> order;  // call ids, oldest first
  };
  // Records `call` under `call_id`, dropping the session's oldest beyond kCallsPerSession.
  static void Remember(Session& s, uint64_t call_id, Call call);

  mutable base::Mutex mu_;
  absl::flat_hash_map<uint64_t, Session> sessions_ ABSL_GUARDED_BY(mu_);
  size_t recorded_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace regcache::server::internal

#endif  // REGCACHE_SERVER_INTERNAL_CALL_LEDGER_H_
