/* The registered allocator from a program built OUTSIDE the project, against the installed
 * files only:
 *   cc hello_alloc.c $(pkg-config --cflags --libs regcache_alloc) -ldl
 * Connects to the regcached in argv[1], sets the allocator up over 16 MiB of the session's
 * memory, allocates from it, registers an allocation, prints the rkey and which library the
 * process's malloc resolved to (regcache_alloc.h promises jemalloc), frees and shuts down.
 * Exit 0 only when every call succeeded. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <regcache/regcache_alloc.h>

static int Fail(const char* call, regcache_code_t code) {
  fprintf(stderr, "%s: %s: %s\n", call, regcache_code_name(code), regcache_last_error());
  return 1;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: %s <socket_dir>\n", argv[0]);
    return 2;
  }
  regcache_client_t* client = NULL;
  regcache_code_t code = regcache_connect(argv[1], NULL, &client);
  if (code != REGCACHE_OK) return Fail("regcache_connect", code);
  code = regcache_alloc_init(client, 16 << 20);
  if (code != REGCACHE_OK) return Fail("regcache_alloc_init", code);
  regcache_alloc_info_t info;
  code = regcache_alloc_info(&info);
  if (code != REGCACHE_OK) return Fail("regcache_alloc_info", code);
  char* buf = regcache_malloc(64 << 10);
  if (buf == NULL) {
    perror("regcache_malloc");
    return 1;
  }
  const uintptr_t lo = (uintptr_t)info.base;
  if ((uintptr_t)buf < lo || (uintptr_t)buf + (64 << 10) > lo + info.length) {
    fprintf(stderr, "regcache_malloc returned %p outside the region\n", (void*)buf);
    return 1;
  }
  memset(buf, 0x5a, 64 << 10);
  regcache_key_t key;
  code = regcache_malloc_key(buf, 64 << 10, REGCACHE_LOCAL_WRITE | REGCACHE_REMOTE_WRITE, &key);
  if (code != REGCACHE_OK) return Fail("regcache_malloc_key", code);
  Dl_info where;
  if (dladdr(dlsym(RTLD_DEFAULT, "malloc"), &where) == 0 || where.dli_fname == NULL) {
    fprintf(stderr, "dladdr(malloc) failed\n");
    return 1;
  }
  const char* slash = strrchr(where.dli_fname, '/');
  printf("alloc: rkey=0x%x malloc=%s\n", key.rkey, slash != NULL ? slash + 1 : where.dli_fname);
  code = regcache_release(client, key.handle);
  if (code != REGCACHE_OK) return Fail("regcache_release", code);
  regcache_free(buf);
  code = regcache_alloc_fini();
  if (code != REGCACHE_OK) return Fail("regcache_alloc_fini", code);
  regcache_close(client);
  return 0;
}
