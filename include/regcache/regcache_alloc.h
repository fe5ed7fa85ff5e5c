/* regcache_alloc.h — a registered-memory allocator: malloc/free whose memory is already the
 * session's attached memory, so registering any allocation is a pure key map in the daemon (a
 * cache miss at worst, never a new attach or pin).
 *
 *   regcache_alloc_init(client, 256 << 20);           // one region of the session's memory
 *   float* buf = regcache_malloc(n * sizeof(float));  // carved from it
 *   regcache_key_t k;
 *   regcache_malloc_key(buf, n * sizeof(float), REGCACHE_REMOTE_WRITE | ..., &k);
 *   ...
 *   regcache_release(client, k.handle);
 *   regcache_free(buf);
 *
 * OPT-IN, AND IT REPLACES malloc: this library (libregcache_alloc.so; pkg-config
 * regcache_alloc, CMake regcache::alloc) is built on jemalloc, and Debian's jemalloc is
 * unprefixed — linking it (both name jemalloc among the libraries to link, so it comes before
 * libc) replaces the whole process's malloc, free, new and delete with jemalloc's. Only
 * programs that link regcache_alloc are affected; the client library (libregcache.so) does not
 * link jemalloc.
 *
 * How: regcache_alloc_init obtains one region of `arena_bytes` with regcache_allocate (daemon
 * memory, mapped here and attached) and creates a jemalloc arena whose extent hooks carve
 * extents out of that region only. regcache_malloc allocates from that arena with the thread
 * cache bypassed (so memory of the arena never migrates to the process's own malloc, nor the
 * process's into it). The arena never gives memory back to the kernel: freed extents are
 * retained for reuse (the pages stay attached and pinned, which is the point), and the arena's
 * own metadata lives in the region too. When the region is used up, regcache_malloc returns
 * NULL with errno ENOMEM; it never falls back to other memory.
 *
 * Errors of the functions returning a regcache_code_t read like the client's: the code, and the
 * message in regcache_last_error().
 *
 * Thread safety: regcache_malloc, regcache_free and regcache_malloc_key may be called from any
 * thread at any time after regcache_alloc_init succeeded; init and fini must not race with
 * anything.
 */
#ifndef REGCACHE_REGCACHE_ALLOC_H_
#define REGCACHE_REGCACHE_ALLOC_H_

#include <stddef.h>
#include <stdint.h>

#include "regcache/regcache.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct regcache_alloc_info {
  uint64_t memory_id; /* the region's memory (regcache_memory_t.id) */
  void* base;         /* the region: [base, base + length) */
  uint64_t length;
  uint64_t carved; /* bytes handed to jemalloc so far (extents, alignment gaps included) */
  uint32_t arena;  /* the jemalloc arena index */
  uint32_t reserved;
} regcache_alloc_info_t;

/* Sets the allocator up over `client` (which must stay open until regcache_alloc_fini) with a
 * region of `arena_bytes` (rounded up to the page size; at least 8 MiB: jemalloc's own
 * metadata takes the first 2 MiB block). REGCACHE_FAILED_PRECONDITION when already set up;
 * REGCACHE_INVALID_ARGUMENT for a NULL client or a size below the minimum; the daemon's
 * errors of regcache_allocate (REGCACHE_RESOURCE_EXHAUSTED beyond the session's quota). */
REGCACHE_API regcache_code_t regcache_alloc_init(regcache_client_t* client, uint64_t arena_bytes);

/* `size` bytes (0 counts as 1) of registered-ready memory, aligned as malloc's. NULL with errno
 * ENOMEM when the region is used up, EINVAL before regcache_alloc_init. */
REGCACHE_API void* regcache_malloc(size_t size);

/* Gives back memory of regcache_malloc. NULL is a no-op. Only pointers regcache_malloc
 * returned (anything else is undefined, as with free). Keys over the memory stay valid until
 * released: freeing does not invalidate them. */
REGCACHE_API void regcache_free(void* ptr);

/* regcache_register over the allocator's client, for [ptr, ptr + length) inside the region.
 * REGCACHE_OUT_OF_RANGE when the range is not inside the region; REGCACHE_FAILED_PRECONDITION
 * before regcache_alloc_init. */
REGCACHE_API regcache_code_t regcache_malloc_key(const void* ptr, uint64_t length, uint32_t access,
                                                 regcache_key_t* out);

/* The region and how much of it jemalloc has taken. */
REGCACHE_API regcache_code_t regcache_alloc_info(regcache_alloc_info_t* out);

/* Destroys the arena and detaches the region (keys over it are invalidated). REQUIRES: every
 * allocation was freed. REGCACHE_FAILED_PRECONDITION when not set up. */
REGCACHE_API regcache_code_t regcache_alloc_fini(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* REGCACHE_REGCACHE_ALLOC_H_ */
