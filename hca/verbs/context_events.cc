// Context's watch of the device's asynchronous events (context.h: StartEventWatch, health).
#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "base/log.h"
#include "hca/verbs/context.h"
#include "hca/verbs/wc_status.h"

namespace regcache::hca::verbs {
namespace {

// rdma-core's ibv_event_type_str, kept here so that the backend needs no more of libibverbs
// than the calls it makes.
const char* EventName(ibv_event_type t) {
  switch (t) {
    case IBV_EVENT_CQ_ERR:
      return "CQ_ERR";
    case IBV_EVENT_QP_FATAL:
      return "QP_FATAL";
    case IBV_EVENT_QP_REQ_ERR:
      return "QP_REQ_ERR";
    case IBV_EVENT_QP_ACCESS_ERR:
      return "QP_ACCESS_ERR";
    case IBV_EVENT_COMM_EST:
      return "COMM_EST";
    case IBV_EVENT_SQ_DRAINED:
      return "SQ_DRAINED";
    case IBV_EVENT_PATH_MIG:
      return "PATH_MIG";
    case IBV_EVENT_PATH_MIG_ERR:
      return "PATH_MIG_ERR";
    case IBV_EVENT_DEVICE_FATAL:
      return "DEVICE_FATAL";
    case IBV_EVENT_PORT_ACTIVE:
      return "PORT_ACTIVE";
    case IBV_EVENT_PORT_ERR:
      return "PORT_ERR";
    case IBV_EVENT_LID_CHANGE:
      return "LID_CHANGE";
    case IBV_EVENT_PKEY_CHANGE:
      return "PKEY_CHANGE";
    case IBV_EVENT_SM_CHANGE:
      return "SM_CHANGE";
    case IBV_EVENT_SRQ_ERR:
      return "SRQ_ERR";
    case IBV_EVENT_SRQ_LIMIT_REACHED:
      return "SRQ_LIMIT_REACHED";
    case IBV_EVENT_QP_LAST_WQE_REACHED:
      return "QP_LAST_WQE_REACHED";
    case IBV_EVENT_CLIENT_REREGISTER:
      return "CLIENT_REREGISTER";
    case IBV_EVENT_GID_CHANGE:
      return "GID_CHANGE";
    case IBV_EVENT_WQ_FATAL:
      return "WQ_FATAL";
  }
  return "UNKNOWN";
}

}  // namespace

absl::Status Context::StartEventWatch() {
  const int fd = ctx_->async_fd;
  const int flags = fcntl(fd, F_GETFL);
  if (flags < 0 || fcntl(fd, F_SETFL, flags | O_NONBLOCK) != 0) {
    return ErrnoStatus(errno, "making the device's async event file non-blocking");
  }
  stop_events_ = base::UniqueFd(eventfd(0, EFD_CLOEXEC));
  if (!stop_events_) return ErrnoStatus(errno, "eventfd for the async event watch");
  events_ = std::thread([this] { WatchEvents(); });
  return absl::OkStatus();
}

void Context::StopEventWatch() {
  if (!events_.joinable()) return;
  const uint64_t one = 1;
  if (write(stop_events_.get(), &one, sizeof(one)) != sizeof(one)) {
    RC_LOG(ERROR) << "verbs: could not stop the async event watch";
  }
  events_.join();
}

absl::Status Context::health() const {
  if (!failed_.load(std::memory_order_acquire)) return absl::OkStatus();
  base::MutexLock lock(&health_mu_);
  return health_;
}

void Context::WatchEvents() {
  pollfd fds[2] = {{ctx_->async_fd, POLLIN, 0}, {stop_events_.get(), POLLIN, 0}};
  for (;;) {
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      RC_LOG(ERROR) << ErrnoStatus(errno, "poll of the device's async event file");
      return;
    }
    if (fds[1].revents != 0) return;
    if ((fds[0].revents & (POLLERR | POLLHUP | POLLNVAL)) != 0) {
      RC_LOG(ERROR) << "verbs: the device's async event file reports an error; no more events";
      return;
    }
    ibv_async_event event;
    while (ibv_get_async_event(ctx_, &event) == 0) {
      OnEvent(event);
      ibv_ack_async_event(&event);  // before anything may destroy the object it names
    }
  }
}

void Context::OnEvent(const ibv_async_event& event) {
  const char* device = ibv_get_device_name(ctx_->device);
  switch (event.event_type) {
    case IBV_EVENT_DEVICE_FATAL: {
      absl::Status s = absl::UnavailableError(absl::StrFormat(
          "device %s failed (IBV_EVENT_DEVICE_FATAL) at %s: nothing on it works any more, and "
          "its keys reach nothing; restart regcached once the device is back",
          device, absl::FormatTime(absl::Now(), absl::UTCTimeZone())));
      RC_LOG(ERROR) << "verbs: " << s.message();
      {
        base::MutexLock lock(&health_mu_);
        health_ = std::move(s);
      }
      failed_.store(true, std::memory_order_release);
      return;
    }
    case IBV_EVENT_PORT_ERR:
    case IBV_EVENT_PORT_ACTIVE:
      RC_LOG(WARNING) << "verbs: " << device << " port " << event.element.port_num << ": "
                      << EventName(event.event_type);
      return;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_PATH_MIG_ERR:
      RC_LOG(WARNING) << "verbs: " << device << " queue pair "
                      << absl::StrCat("0x", absl::Hex(event.element.qp->qp_num)) << ": "
                      << EventName(event.event_type);
      return;
    default:
      RC_LOG(INFO) << "verbs: " << device << ": " << EventName(event.event_type);
  }
}

}  // namespace regcache::hca::verbs
