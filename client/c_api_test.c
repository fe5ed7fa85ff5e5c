/* The C ABI from a C11 translation unit (include/regcache/regcache.h), against a real regcached
 * on the simulated device that this test starts itself (fork/exec of REGCACHED_PATH, sockets in
 * a fresh temp dir, every wait bounded). It walks every call: connect, allocate, attach an fd,
 * register, window, query, usage, invalidate, release, prefetch, detach, close; and checks that
 * bad input (NULL pointers, length 0, unknown handles, a bad enum) gets its code and a message,
 * never a crash. Exit status 0 = every check passed; the failures are printed. */
#define _GNU_SOURCE
#include <sys/prctl.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "regcache/regcache.h"

static int failures = 0;

#define CHECK(cond)                                                                                \
  do {                                                                                             \
    if (!(cond)) {                                                                                 \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: \"%s\")\n", __FILE__, __LINE__, #cond, \
              regcache_last_error());                                                              \
      failures++;                                                                                  \
    }                                                                                              \
  } while (0)

/* A call's code is `want`, with a message containing `needle` (NULL: any nonempty message);
 * a success leaves the message "". */
static void CheckCode(int line, const char* call, regcache_code_t got, regcache_code_t want,
                      const char* needle) {
  const char* msg = regcache_last_error();
  if (got != want) {
    fprintf(stderr, "%s:%d: %s returned %s, want %s (\"%s\")\n", __FILE__, line, call,
            regcache_code_name(got), regcache_code_name(want), msg);
    failures++;
  } else if (want != REGCACHE_OK && (msg[0] == '\0' || (needle && !strstr(msg, needle)))) {
    fprintf(stderr, "%s:%d: %s: message \"%s\" lacks \"%s\"\n", __FILE__, line, call, msg,
            needle ? needle : "(any)");
    failures++;
  } else if (want == REGCACHE_OK && msg[0] != '\0') {
    fprintf(stderr, "%s:%d: %s succeeded but left \"%s\"\n", __FILE__, line, call, msg);
    failures++;
  }
}
#define CHECK_CODE(call, want, needle) CheckCode(__LINE__, #call, (call), (want), (needle))

static const uint32_t kRw =
    REGCACHE_LOCAL_READ | REGCACHE_LOCAL_WRITE | REGCACHE_REMOTE_READ | REGCACHE_REMOTE_WRITE;

static char dir[64];
static pid_t daemon_pid = -1;

static int Exists(const char* name) {
  char path[128];
  struct stat st;
  snprintf(path, sizeof(path), "%s/%s", dir, name);
  return stat(path, &st) == 0;
}

/* Starts regcached in a fresh temp dir and waits (at most 10 s) for its two sockets. */
static int StartDaemon(void) {
  snprintf(dir, sizeof(dir), "/tmp/regcache-capi-XXXXXX");
  if (mkdtemp(dir) == NULL) return 0;
  daemon_pid = fork();
  if (daemon_pid == 0) {
    /* The daemon dies with this test, even when the test aborts. */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    char socket_flag[96];
    snprintf(socket_flag, sizeof(socket_flag), "--socket_dir=%s", dir);
    execl(REGCACHED_PATH, REGCACHED_PATH, "--device=sim", socket_flag, "--log_level=warning",
          (char*)NULL);
    _exit(127);
  }
  for (int i = 0; i < 1000; i++) {
    if (Exists("control.sock") && Exists("grpc.sock")) return 1;
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return 0;
}

static void StopDaemon(void) {
  if (daemon_pid > 0) {
    kill(daemon_pid, SIGTERM);
    int reaped = 0;
    for (int i = 0; i < 1000 && !reaped; i++) {
      reaped = waitpid(daemon_pid, NULL, WNOHANG) == daemon_pid;
      struct timespec ts = {0, 10 * 1000 * 1000};
      if (!reaped) nanosleep(&ts, NULL);
    }
    if (!reaped) { /* it did not drain within 10 s */
      fprintf(stderr, "regcached ignored SIGTERM; killing it\n");
      kill(daemon_pid, SIGKILL);
      waitpid(daemon_pid, NULL, 0);
      failures++;
    }
  }
  char cmd[96];
  snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
  if (system(cmd) != 0) fprintf(stderr, "could not remove %s\n", dir);
}

static void TestConnectErrors(void) {
  regcache_client_t* c = NULL;
  /* No directory: REGCACHE_SOCKET_DIR names it. */
  setenv("REGCACHE_SOCKET_DIR", "/nonexistent-regcache-env-dir", 1);
  CHECK_CODE(regcache_connect(NULL, NULL, &c), REGCACHE_UNAVAILABLE, "regcache-env-dir");
  CHECK_CODE(regcache_connect("", NULL, &c), REGCACHE_UNAVAILABLE, "regcache-env-dir");
  setenv("REGCACHE_SOCKET_DIR", dir, 1);
  CHECK(regcache_connect(NULL, NULL, &c) == REGCACHE_OK);
  regcache_close(c);
  c = NULL;
  unsetenv("REGCACHE_SOCKET_DIR");
  CHECK_CODE(regcache_connect(dir, NULL, NULL), REGCACHE_INVALID_ARGUMENT, "out");
  CHECK_CODE(regcache_connect("/nonexistent-regcache-dir", NULL, &c), REGCACHE_UNAVAILABLE, NULL);
  CHECK(c == NULL);
  CHECK(regcache_session_id(NULL) == 0);
  regcache_close(NULL); /* a no-op */
  CHECK(strcmp(regcache_code_name(REGCACHE_NOT_FOUND), "NOT_FOUND") == 0);
  CHECK(strcmp(regcache_code_name(REGCACHE_UNAUTHENTICATED), "UNAUTHENTICATED") == 0);
  CHECK(strcmp(regcache_code_name(99), "UNKNOWN_CODE") == 0);
  CHECK(strcmp(regcache_code_name(-1), "UNKNOWN_CODE") == 0);
  /* The session's device: named, or the daemon's first; an unknown one lists the devices. */
  CHECK_CODE(regcache_connect_device(dir, NULL, "sim9", &c), REGCACHE_NOT_FOUND, "sim0");
  CHECK(c == NULL);
  CHECK(regcache_connect_device(dir, NULL, "sim0", &c) == REGCACHE_OK);
  regcache_device_t dev;
  CHECK_CODE(regcache_device(NULL, &dev), REGCACHE_INVALID_ARGUMENT, "client");
  CHECK_CODE(regcache_device(c, NULL), REGCACHE_INVALID_ARGUMENT, "out");
  CHECK(regcache_device(c, &dev) == REGCACHE_OK);
  CHECK(dev.index == 0 && dev.port == 1 && dev.node_guid != 0);
  CHECK(dev.key_bounds == REGCACHE_KEY_BOUNDS_KEY); /* the sim checks a key's own range */
  CHECK(strcmp(dev.name, "sim0") == 0);
  CHECK(dev.gid[0] == 0xfe && dev.gid[1] == 0x80);
  regcache_close(c);
  c = NULL;
  /* A device context of the session's own: unknown flags are refused, and the sim cannot. */
  CHECK_CODE(regcache_connect_ex(dir, NULL, NULL, 5, &c), REGCACHE_INVALID_ARGUMENT, "0x4");
  CHECK_CODE(regcache_connect_ex(dir, NULL, NULL, REGCACHE_CONNECT_OWN_DEVICE_CONTEXT, &c),
             REGCACHE_UNIMPLEMENTED, "cannot give a session");
  CHECK(c == NULL);
  CHECK(regcache_connect_ex(dir, NULL, "sim0", 0, &c) == REGCACHE_OK);
  regcache_close(c);
  c = NULL;
}

/* Every call refuses a NULL client and a NULL output pointer. */
static void TestNullPointers(regcache_client_t* c, const regcache_memory_t* m) {
  regcache_memory_t mem;
  regcache_key_t key;
  regcache_key_info_t info;
  regcache_usage_t usage;
  CHECK_CODE(regcache_allocate(NULL, 4096, 0, 0, &mem), REGCACHE_INVALID_ARGUMENT, "client");
  CHECK_CODE(regcache_allocate(c, 4096, 0, 0, NULL), REGCACHE_INVALID_ARGUMENT, "out");
  CHECK_CODE(regcache_attach_fd(NULL, 0, 0, 4096, 0, &mem), REGCACHE_INVALID_ARGUMENT, "client");
  CHECK_CODE(regcache_attach_fd(c, 0, 0, 4096, 0, NULL), REGCACHE_INVALID_ARGUMENT, "out");
  CHECK_CODE(regcache_attach_fd(c, -1, 0, 4096, 0, &mem), REGCACHE_INVALID_ARGUMENT, "fd");
  CHECK_CODE(regcache_detach(NULL, m), REGCACHE_INVALID_ARGUMENT, "client");
  CHECK_CODE(regcache_detach(c, NULL), REGCACHE_INVALID_ARGUMENT, "memory");
  CHECK_CODE(regcache_register(NULL, m->data, 4096, kRw, REGCACHE_PREFETCH_NONE, &key),
             REGCACHE_INVALID_ARGUMENT, "client");
  CHECK_CODE(regcache_register(c, m->data, 4096, kRw, REGCACHE_PREFETCH_NONE, NULL),
             REGCACHE_INVALID_ARGUMENT, "out");
  CHECK_CODE(regcache_register(c, NULL, 4096, kRw, REGCACHE_PREFETCH_NONE, &key),
             REGCACHE_INVALID_ARGUMENT, "addr");
  CHECK_CODE(regcache_window(NULL, 1, 0, 4096, kRw, &key), REGCACHE_INVALID_ARGUMENT, "client");
  CHECK_CODE(regcache_window(c, 1, 0, 4096, kRw, NULL), REGCACHE_INVALID_ARGUMENT, "out");
  CHECK_CODE(regcache_release(NULL, 1), REGCACHE_INVALID_ARGUMENT, "client");
  CHECK_CODE(regcache_invalidate(NULL, 1), REGCACHE_INVALID_ARGUMENT, "client");
  CHECK_CODE(regcache_query(NULL, 1, &info), REGCACHE_INVALID_ARGUMENT, "client");
  CHECK_CODE(regcache_query(c, 1, NULL), REGCACHE_INVALID_ARGUMENT, "out");
  CHECK_CODE(regcache_prefetch(NULL, m->data, 4096, 0, REGCACHE_PREFETCH_SYNC),
             REGCACHE_INVALID_ARGUMENT, "client");
  CHECK_CODE(regcache_prefetch(c, NULL, 4096, 0, REGCACHE_PREFETCH_SYNC), REGCACHE_INVALID_ARGUMENT,
             "addr");
  CHECK_CODE(regcache_usage(NULL, &usage), REGCACHE_INVALID_ARGUMENT, "client");
  CHECK_CODE(regcache_usage(c, NULL), REGCACHE_INVALID_ARGUMENT, "out");
}

/* Bad values: each gets its canonical code and a message; the session keeps working. */
static void TestBadValues(regcache_client_t* c, const regcache_memory_t* m) {
  regcache_memory_t mem;
  regcache_key_t key;
  regcache_key_info_t info;
  static char not_attached[8192];
  CHECK_CODE(regcache_allocate(c, 0, 0, 0, &mem), REGCACHE_INVALID_ARGUMENT, NULL);
  CHECK_CODE(regcache_allocate(c, 1000, 0, 0, &mem), REGCACHE_INVALID_ARGUMENT, NULL);
  CHECK_CODE(regcache_register(c, m->data, 0, kRw, REGCACHE_PREFETCH_NONE, &key),
             REGCACHE_INVALID_ARGUMENT, "length");
  CHECK_CODE(regcache_register(c, m->data, 4096, kRw, 7, &key),
             REGCACHE_INVALID_ARGUMENT, "prefetch");
  CHECK_CODE(regcache_register(c, not_attached, 4096, kRw, REGCACHE_PREFETCH_NONE, &key),
             REGCACHE_OUT_OF_RANGE, NULL);
  CHECK_CODE(regcache_register(c, (const char*)m->data + m->length - 4096, 8192, kRw,
                               REGCACHE_PREFETCH_NONE, &key),
             REGCACHE_OUT_OF_RANGE, NULL);
  /* A handle this session never held (its tenant bits name another): NOT_FOUND, as another
   * session's handle would be. */
  CHECK_CODE(regcache_release(c, 0xdead0000ull), REGCACHE_NOT_FOUND, "session");
  CHECK_CODE(regcache_invalidate(c, 0xdead0000ull), REGCACHE_NOT_FOUND, "session");
  CHECK_CODE(regcache_query(c, 0xdead0000ull, &info), REGCACHE_NOT_FOUND, "session");
  CHECK_CODE(regcache_window(c, 0xdead0000ull, 0, 4096, kRw, &key), REGCACHE_NOT_FOUND,
             "session");
  CHECK_CODE(regcache_prefetch(c, m->data, 4096, 0, (regcache_prefetch_t)-3),
             REGCACHE_INVALID_ARGUMENT, "prefetch");
  regcache_memory_t unknown = {0xdead0000ull, NULL, 4096};
  CHECK_CODE(regcache_detach(c, &unknown), REGCACHE_NOT_FOUND, NULL);
}

/* Register (miss, then hit), window, query, usage, invalidate, release. */
static void TestKeyLifecycle(regcache_client_t* c, const regcache_memory_t* m) {
  char* buf = (char*)m->data + 3 * 4096;
  regcache_key_t k1, k2, w;
  regcache_key_info_t info;
  regcache_usage_t usage;
  CHECK_CODE(regcache_register(c, buf, 65536, kRw, REGCACHE_PREFETCH_NONE, &k1), REGCACHE_OK, NULL);
  CHECK(k1.handle != 0);
  CHECK(k1.rkey != 0 && k1.lkey != 0);
  CHECK(k1.va <= (uint64_t)(uintptr_t)buf && k1.va + k1.length >= (uint64_t)(uintptr_t)buf + 65536);
  CHECK((k1.access & kRw) == kRw);
  CHECK(k1.hit == 0);
  CHECK_CODE(
      regcache_register(c, buf + 4096, 4096, REGCACHE_LOCAL_READ, REGCACHE_PREFETCH_NONE, &k2),
      REGCACHE_OK, NULL);
  CHECK(k2.hit == 1);
  CHECK(k2.rkey == k1.rkey);

  CHECK_CODE(regcache_window(c, k1.handle, 4096, 8192, REGCACHE_LOCAL_READ, &w), REGCACHE_OK, NULL);
  CHECK(w.handle != 0 && w.handle != k1.handle);
  CHECK(w.length == 8192);
  CHECK_CODE(regcache_query(c, w.handle, &info), REGCACHE_OK, NULL);
  CHECK(info.is_window == 1);
  CHECK(info.parent == k1.handle);
  CHECK(info.revoked == 0);
  CHECK(info.key_state[0] != '\0');
  CHECK_CODE(regcache_query(c, k1.handle, &info), REGCACHE_OK, NULL);
  CHECK(info.handle == k1.handle && info.holders >= 1 && info.is_window == 0);
  CHECK(info.va == k1.va && info.length == k1.length);

  CHECK_CODE(regcache_usage(c, &usage), REGCACHE_OK, NULL);
  CHECK(usage.backings == 1);
  CHECK(usage.backed_bytes == m->length);
  CHECK(usage.live_registrations >= 1);

  CHECK_CODE(regcache_invalidate(c, k1.handle), REGCACHE_OK, NULL);
  CHECK_CODE(regcache_query(c, k1.handle, &info), REGCACHE_OK, NULL);
  CHECK(info.revoked == 1);
  CHECK_CODE(regcache_release(c, w.handle), REGCACHE_OK, NULL);
  /* Two grants, two holds (the hit may return the same handle): two releases. */
  CHECK_CODE(regcache_release(c, k2.handle), REGCACHE_OK, NULL);
  CHECK_CODE(regcache_release(c, k1.handle), REGCACHE_OK, NULL);
  /* Released for good: the handle is unknown now. */
  regcache_key_t key;
  CHECK_CODE(regcache_query(c, k1.handle, &info), REGCACHE_NOT_FOUND, NULL);
  CHECK_CODE(regcache_release(c, k1.handle), REGCACHE_NOT_FOUND, NULL);
  CHECK_CODE(regcache_invalidate(c, k1.handle), REGCACHE_NOT_FOUND, NULL);
  CHECK_CODE(regcache_window(c, k1.handle, 0, 4096, kRw, &key), REGCACHE_NOT_FOUND, NULL);
}

/* Many ranges in one round trip, each item on its own; a re-registration that keeps the rkey. */
static void TestBatchesAndReregister(regcache_client_t* c, const regcache_memory_t* m) {
  char* base = (char*)m->data + 128 * 4096;
  regcache_register_item_t items[5];
  regcache_key_t keys[5];
  int codes[5];
  uint64_t handles[4];
  for (int i = 0; i < 4; i++) {
    regcache_register_item_t it = {base + i * 4096, 4096, kRw, REGCACHE_PREFETCH_NONE};
    items[i] = it;
  }
  regcache_register_item_t bad = {base, 0, kRw, REGCACHE_PREFETCH_NONE}; /* length 0 */
  items[4] = bad;
  /* The batch ran: OK, and the message names the first item that failed. */
  CHECK(regcache_register_batch(c, items, 5, keys, codes) == REGCACHE_OK);
  CHECK(strstr(regcache_last_error(), "length") != NULL);
  for (int i = 0; i < 4; i++) {
    CHECK(codes[i] == REGCACHE_OK);
    CHECK(keys[i].rkey != 0);
    handles[i] = keys[i].handle;
  }
  CHECK(codes[4] == REGCACHE_INVALID_ARGUMENT);
  CHECK_CODE(regcache_release_batch(c, handles, 4, codes), REGCACHE_OK, NULL);
  for (int i = 0; i < 4; i++) CHECK(codes[i] == REGCACHE_OK);
  CHECK_CODE(regcache_register_batch(c, items, 0, keys, codes), REGCACHE_INVALID_ARGUMENT, NULL);
  CHECK_CODE(regcache_register_batch(c, NULL, 1, keys, codes), REGCACHE_INVALID_ARGUMENT, "items");
  CHECK_CODE(regcache_release_batch(c, handles, 1, NULL), REGCACHE_INVALID_ARGUMENT, "codes");

  regcache_key_t k, grown;
  CHECK_CODE(regcache_register(c, base + 64 * 4096, 4096, REGCACHE_LOCAL_WRITE,
                               REGCACHE_PREFETCH_NONE, &k),
             REGCACHE_OK, NULL);
  CHECK_CODE(regcache_reregister(c, k.handle, base + 64 * 4096, 8192, kRw, &grown), REGCACHE_OK,
             NULL);
  CHECK(grown.same_key == 1);
  CHECK(grown.rkey == k.rkey);
  CHECK_CODE(regcache_reregister(c, grown.handle, NULL, 8192, kRw, &k), REGCACHE_INVALID_ARGUMENT,
             "addr");
  CHECK_CODE(regcache_release(c, grown.handle), REGCACHE_OK, NULL);
}

/* A memfd of the caller's, attached and registered; on-demand memory with a prefetch. */
static void TestFdAndOnDemand(regcache_client_t* c) {
  int fd = memfd_create("c_api_test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  CHECK(fd >= 0);
  if (fd < 0) return;
  CHECK(ftruncate(fd, 1 << 20) == 0);
  regcache_memory_t m;
  regcache_key_t k;
  regcache_usage_t usage;
  CHECK_CODE(regcache_attach_fd(c, fd, 0, 1 << 20, 0, &m), REGCACHE_OK, NULL);
  close(fd); /* the daemon and the mapping keep their own references */
  memset(m.data, 0x5a, 4096);
  CHECK_CODE(regcache_register(c, m.data, 4096, kRw, REGCACHE_PREFETCH_NONE, &k), REGCACHE_OK,
             NULL);
  CHECK_CODE(regcache_release(c, k.handle), REGCACHE_OK, NULL);
  CHECK_CODE(regcache_usage(c, &usage), REGCACHE_OK, NULL);
  CHECK(usage.backings == 2);
  CHECK_CODE(regcache_detach(c, &m), REGCACHE_OK, NULL);
  CHECK_CODE(regcache_usage(c, &usage), REGCACHE_OK, NULL);
  CHECK(usage.backings == 1);

  regcache_memory_t odp;
  CHECK_CODE(regcache_allocate(c, 1 << 20, 0, 1, &odp), REGCACHE_OK, NULL);
  CHECK_CODE(regcache_prefetch(c, odp.data, 65536, 1, REGCACHE_PREFETCH_SYNC), REGCACHE_OK, NULL);
  CHECK_CODE(regcache_register(c, odp.data, 65536, kRw, REGCACHE_PREFETCH_ASYNC, &k), REGCACHE_OK,
             NULL);
  CHECK_CODE(regcache_release(c, k.handle), REGCACHE_OK, NULL);
  CHECK_CODE(regcache_detach(c, &odp), REGCACHE_OK, NULL);
}

/* Target endpoints: the daemon's address back for a well-formed peer, each bad field refused,
 * destroy once. */
static void TestEndpoints(regcache_client_t* c) {
  const uint32_t remote = REGCACHE_REMOTE_READ | REGCACHE_REMOTE_WRITE | REGCACHE_REMOTE_ATOMIC;
  regcache_qp_address_t peer;
  memset(&peer, 0, sizeof(peer));
  peer.qpn = 0x1234;
  peer.psn = 0x4242;
  peer.gid[0] = 0xfe;
  peer.gid[1] = 0x80;
  peer.gid[15] = 0x07;
  peer.mtu = 1024;
  regcache_endpoint_t ep, other;
  CHECK_CODE(regcache_endpoint_create(c, NULL, remote, &ep), REGCACHE_INVALID_ARGUMENT, "peer");
  CHECK_CODE(regcache_endpoint_create(c, &peer, remote, NULL), REGCACHE_INVALID_ARGUMENT, "out");
  CHECK_CODE(regcache_endpoint_create(NULL, &peer, remote, &ep), REGCACHE_INVALID_ARGUMENT,
             "client");
  CHECK_CODE(regcache_endpoint_create(c, &peer, REGCACHE_LOCAL_WRITE, &ep),
             REGCACHE_INVALID_ARGUMENT, "access");
  regcache_qp_address_t bad = peer;
  bad.psn = 1u << 24;
  CHECK_CODE(regcache_endpoint_create(c, &bad, remote, &ep), REGCACHE_INVALID_ARGUMENT, "psn");
  bad = peer;
  bad.mtu = 1500;
  CHECK_CODE(regcache_endpoint_create(c, &bad, remote, &ep), REGCACHE_INVALID_ARGUMENT, "mtu");

  CHECK_CODE(regcache_endpoint_create(c, &peer, remote, &ep), REGCACHE_OK, NULL);
  CHECK(ep.id != 0);
  CHECK(ep.local.qpn != 0 && ep.local.qpn < (1u << 24));
  CHECK(ep.local.psn < (1u << 24));
  CHECK(ep.local.gid[0] != 0 || ep.local.gid[15] != 0);
  CHECK(ep.local.mtu == 4096); /* the sim's port */
  CHECK(ep.access == remote);
  CHECK_CODE(regcache_endpoint_create(c, &peer, REGCACHE_REMOTE_READ, &other), REGCACHE_OK, NULL);
  CHECK(other.id != ep.id && other.local.qpn != ep.local.qpn);
  CHECK_CODE(regcache_endpoint_destroy(c, ep.id), REGCACHE_OK, NULL);
  CHECK_CODE(regcache_endpoint_destroy(c, ep.id), REGCACHE_NOT_FOUND, "no endpoint");
  CHECK_CODE(regcache_endpoint_destroy(NULL, other.id), REGCACHE_INVALID_ARGUMENT, "client");
  /* `other` is left to the end of the session. */
}

/* Peer descriptors: a key and an endpoint described, packed, unpacked and back as text; NULLs,
 * short buffers and malformed bytes refused. */
static void TestDescriptors(regcache_client_t* c, const regcache_memory_t* m) {
  regcache_key_t k;
  CHECK_CODE(regcache_register(c, m->data, 8192, kRw, REGCACHE_PREFETCH_NONE, &k),
             REGCACHE_OK, NULL);
  regcache_qp_address_t peer;
  memset(&peer, 0, sizeof(peer));
  peer.qpn = 0x77;
  peer.gid[0] = 0xfe;
  peer.gid[1] = 0x80;
  peer.gid[15] = 0x09;
  peer.mtu = 1024;
  regcache_endpoint_t ep;
  CHECK_CODE(regcache_endpoint_create(c, &peer, REGCACHE_REMOTE_WRITE, &ep), REGCACHE_OK, NULL);
  regcache_device_t dev;
  CHECK_CODE(regcache_device(c, &dev), REGCACHE_OK, NULL);

  regcache_descriptor_t d, back;
  CHECK_CODE(regcache_describe_key(NULL, &k, NULL, &d), REGCACHE_INVALID_ARGUMENT, "client");
  CHECK_CODE(regcache_describe_key(c, NULL, NULL, &d), REGCACHE_INVALID_ARGUMENT, "key");
  CHECK_CODE(regcache_describe_key(c, &k, NULL, NULL), REGCACHE_INVALID_ARGUMENT, "out");
  CHECK_CODE(regcache_describe_key(c, &k, &ep, &d), REGCACHE_OK, NULL);
  CHECK(d.rkey == k.rkey && d.addr == k.va && d.length == k.length);
  CHECK(d.access == REGCACHE_REMOTE_WRITE); /* no local right goes to a peer */
  CHECK(d.node_guid == dev.node_guid && d.port == dev.port && d.key_bounds == dev.key_bounds);
  CHECK(memcmp(d.gid, dev.gid, 16) == 0);
  CHECK(d.has_endpoint == 1 && d.endpoint.qpn == ep.local.qpn && d.endpoint.mtu == ep.local.mtu);

  uint8_t bytes[REGCACHE_DESCRIPTOR_MAX_BYTES];
  size_t n = 0;
  CHECK_CODE(regcache_descriptor_pack(&d, bytes, 95, &n), REGCACHE_OUT_OF_RANGE, "96 bytes");
  CHECK_CODE(regcache_descriptor_pack(&d, NULL, sizeof(bytes), &n), REGCACHE_INVALID_ARGUMENT,
             "buf");
  CHECK_CODE(regcache_descriptor_pack(&d, bytes, sizeof(bytes), &n), REGCACHE_OK, NULL);
  CHECK(n == 96 && memcmp(bytes, "RCKD", 4) == 0);
  CHECK_CODE(regcache_descriptor_unpack(bytes, n, &back), REGCACHE_OK, NULL);
  CHECK(memcmp(&back, &d, sizeof(d)) == 0);
  CHECK_CODE(regcache_descriptor_unpack(bytes, n - 1, &back), REGCACHE_INVALID_ARGUMENT,
             "truncated");
  bytes[4] = 9;
  CHECK_CODE(regcache_descriptor_unpack(bytes, n, &back), REGCACHE_FAILED_PRECONDITION, "newer");

  char text[REGCACHE_DESCRIPTOR_MAX_TEXT];
  CHECK_CODE(regcache_descriptor_to_text(&d, text, 20), REGCACHE_OUT_OF_RANGE, "134 bytes");
  CHECK_CODE(regcache_descriptor_to_text(&d, text, sizeof(text)), REGCACHE_OK, NULL);
  CHECK(strncmp(text, "rcd1:", 5) == 0 && strlen(text) == REGCACHE_DESCRIPTOR_MAX_TEXT - 1);
  memset(&back, 0xff, sizeof(back));
  CHECK_CODE(regcache_descriptor_from_text(text, &back), REGCACHE_OK, NULL);
  CHECK(memcmp(&back, &d, sizeof(d)) == 0);
  CHECK_CODE(regcache_descriptor_from_text("rcd1:!!", &back), REGCACHE_INVALID_ARGUMENT,
             "base64url");
  CHECK_CODE(regcache_descriptor_from_text(NULL, &back), REGCACHE_INVALID_ARGUMENT, "text");

  regcache_descriptor_t odd = d;
  odd.has_endpoint = 2;
  CHECK_CODE(regcache_descriptor_pack(&odd, bytes, sizeof(bytes), &n), REGCACHE_INVALID_ARGUMENT,
             "has_endpoint");
  odd = d;
  odd.access = REGCACHE_LOCAL_READ;
  CHECK_CODE(regcache_descriptor_to_text(&odd, text, sizeof(text)), REGCACHE_INVALID_ARGUMENT,
             "remote");
  /* Without an endpoint: 64 bytes. */
  CHECK_CODE(regcache_describe_key(c, &k, NULL, &d), REGCACHE_OK, NULL);
  CHECK(d.has_endpoint == 0);
  CHECK_CODE(regcache_descriptor_pack(&d, bytes, sizeof(bytes), &n), REGCACHE_OK, NULL);
  CHECK(n == 64);
  /* A key with no remote right describes nothing a peer could use. */
  regcache_key_t local;
  CHECK_CODE(regcache_register(c, m->data, 4096, REGCACHE_LOCAL_READ, REGCACHE_PREFETCH_NONE,
                               &local),
             REGCACHE_OK, NULL);
  local.access &= ~(REGCACHE_REMOTE_READ | REGCACHE_REMOTE_WRITE | REGCACHE_REMOTE_ATOMIC);
  CHECK_CODE(regcache_describe_key(c, &local, NULL, &d), REGCACHE_INVALID_ARGUMENT,
             "no remote right");
  CHECK_CODE(regcache_release(c, local.handle), REGCACHE_OK, NULL);
  CHECK_CODE(regcache_release(c, k.handle), REGCACHE_OK, NULL);
  CHECK_CODE(regcache_endpoint_destroy(c, ep.id), REGCACHE_OK, NULL);
}

/* What the revocation callback saw (it runs on a thread of the library). */
typedef struct Seen {
  atomic_int calls;
  atomic_uint_least64_t handle;
  atomic_uint reason;
} Seen;

static void OnRevoked(const regcache_revocation_t* r, void* user_data) {
  Seen* seen = (Seen*)user_data;
  atomic_store(&seen->handle, r->handle);
  atomic_store(&seen->reason, r->reason);
  atomic_fetch_add(&seen->calls, 1);
}

static int WaitForCalls(Seen* seen, int want) { /* bounded: 10 s */
  for (int i = 0; i < 10000 && atomic_load(&seen->calls) < want; ++i) {
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  return atomic_load(&seen->calls) >= want;
}

/* The revocation callback: called with the handle and reason of a key this process held, from
 * a thread of the library; removed, never again. */
static void TestRevocationCallback(regcache_client_t* c, const regcache_memory_t* m) {
  static Seen seen;
  CHECK_CODE(regcache_set_revocation_callback(NULL, OnRevoked, &seen), REGCACHE_INVALID_ARGUMENT,
             "client");
  CHECK_CODE(regcache_set_revocation_callback(c, OnRevoked, &seen), REGCACHE_OK, NULL);
  regcache_key_t k;
  CHECK_CODE(regcache_register(c, (char*)m->data + (1 << 20), 4096, kRw, REGCACHE_PREFETCH_NONE,
                               &k),
             REGCACHE_OK, NULL);
  CHECK_CODE(regcache_invalidate(c, k.handle), REGCACHE_OK, NULL);
  CHECK(WaitForCalls(&seen, 1));
  CHECK(atomic_load(&seen.handle) == k.handle);
  CHECK(atomic_load(&seen.reason) == REGCACHE_REVOKED_INVALIDATED);
  CHECK_CODE(regcache_release(c, k.handle), REGCACHE_OK, NULL);

  CHECK_CODE(regcache_set_revocation_callback(c, NULL, NULL), REGCACHE_OK, NULL);
  const int before = atomic_load(&seen.calls);
  CHECK_CODE(regcache_register(c, (char*)m->data + (1 << 20), 8192, kRw, REGCACHE_PREFETCH_NONE,
                               &k),
             REGCACHE_OK, NULL);
  CHECK_CODE(regcache_invalidate(c, k.handle), REGCACHE_OK, NULL);
  CHECK_CODE(regcache_release(c, k.handle), REGCACHE_OK, NULL);
  struct timespec settle = {0, 200000000}; /* time for an event the watcher would have seen */
  nanosleep(&settle, NULL);
  CHECK(atomic_load(&seen.calls) == before);
}

int main(void) {
  if (!StartDaemon()) {
    fprintf(stderr, "regcached did not start (%s)\n", REGCACHED_PATH);
    StopDaemon();
    return 1;
  }
  TestConnectErrors();
  regcache_options_t options = {5000, 0};
  regcache_client_t* c = NULL;
  CHECK_CODE(regcache_connect(dir, &options, &c), REGCACHE_OK, NULL);
  if (c != NULL) {
    CHECK(regcache_session_id(c) != 0);
    regcache_memory_t m;
    CHECK_CODE(regcache_allocate(c, 4 << 20, 0, 0, &m), REGCACHE_OK, NULL);
    CHECK(m.id != 0 && m.data != NULL && m.length == (4u << 20));
    if (m.data != NULL) {
      memset(m.data, 0xa5, m.length); /* mapped writable here */
      TestNullPointers(c, &m);
      TestBadValues(c, &m);
      TestKeyLifecycle(c, &m);
      TestBatchesAndReregister(c, &m);
      TestFdAndOnDemand(c);
      TestEndpoints(c);
      TestDescriptors(c, &m);
      TestRevocationCallback(c, &m);
      CHECK_CODE(regcache_detach(c, &m), REGCACHE_OK, NULL);
    }
    regcache_close(c);
  }
  StopDaemon();
  if (failures != 0) {
    fprintf(stderr, "c_api_test: %d check(s) failed\n", failures);
    return 1;
  }
  printf("c_api_test: all checks passed\n");
  return 0;
}
