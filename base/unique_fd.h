// UniqueFd: owns one file descriptor and closes it when it goes (RAII), so that an error path
// cannot leak one and a destructor need not list them. Move-only.
//
//   base::UniqueFd fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
//   if (!fd) return base::ErrnoToStatus(errno, "socket");
//   if (::bind(fd.get(), ...) != 0) return base::ErrnoToStatus(errno, "bind");  // fd closed
//   return Server(std::move(fd));
//
// Thread safety: thread-compatible; get() may be called concurrently with itself.
#ifndef REGCACHE_BASE_UNIQUE_FD_H_
#define REGCACHE_BASE_UNIQUE_FD_H_

#include <unistd.h>

#include <cerrno>
#include <utility>

namespace regcache::base {

class UniqueFd {
 public:
  UniqueFd() = default;
  // Takes ownership of `fd` (negative: none).
  explicit UniqueFd(int fd) : fd_(fd < 0 ? -1 : fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(o.release()) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(o.release());
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  explicit operator bool() const { return fd_ >= 0; }
  // Gives the descriptor up without closing it; -1 if none.
  [[nodiscard]] int release() { return std::exchange(fd_, -1); }
  // Closes the descriptor owned (if any) and owns `fd` instead. errno is kept, so an error path
  // can read the errno of the call that failed after the descriptor went.
  void reset(int fd = -1) {
    if (fd_ >= 0) {
      const int saved = errno;
      ::close(fd_);
      errno = saved;
    }
    fd_ = fd < 0 ? -1 : fd;
  }

 private:
  int fd_ = -1;
};

}  // namespace regcache::base
#endif  // REGCACHE_BASE_UNIQUE_FD_H_
