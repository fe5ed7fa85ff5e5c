/* A client program built OUTSIDE the project, against the installed client only:
 *   cc hello.c $(pkg-config --cflags --libs regcache)
 * Connects to the regcached in argv[1], allocates 1 MiB of the session's memory, registers
 * it, prints the rkey, releases and closes. Exit 0 only when every call succeeded. */
#include <stdio.h>
#include <string.h>

#include <regcache/regcache.h>

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
  regcache_memory_t memory;
  code = regcache_allocate(client, 1 << 20, 0, 0, &memory);
  if (code != REGCACHE_OK) return Fail("regcache_allocate", code);
  memset(memory.data, 0x5a, 4096); /* it is mapped here */
  regcache_key_t key;
  code = regcache_register(client, memory.data, 4096,
                           REGCACHE_LOCAL_WRITE | REGCACHE_REMOTE_READ | REGCACHE_REMOTE_WRITE, 0,
                           &key);
  if (code != REGCACHE_OK) return Fail("regcache_register", code);
  printf("c: session=%llu rkey=0x%x lkey=0x%x\n",
         (unsigned long long)regcache_session_id(client), key.rkey, key.lkey);
  code = regcache_release(client, key.handle);
  if (code != REGCACHE_OK) return Fail("regcache_release", code);
  code = regcache_detach(client, &memory);
  if (code != REGCACHE_OK) return Fail("regcache_detach", code);
  regcache_close(client);
  return 0;
}
